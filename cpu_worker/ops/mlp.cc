#include "cpu_worker/ops/mlp.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/elementwise.h"

namespace tandem::ops {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

absl::StatusOr<LinearWeight> Load(const Checkpoint& ckpt, const std::string& name,
                                  ComputeType prefer) {
  TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt.Tensor(name));
  return LinearWeight::Create(t, prefer);
}

absl::StatusOr<LinearWeight> LoadExpert(const Checkpoint& ckpt, const std::string& base,
                                        int64_t expert, ComputeType prefer) {
  TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt.ExpertTensor(base, expert));
  return LinearWeight::Create(t, prefer);
}

}  // namespace

void RunMlp(const MlpWeights& m, const float* x, int64_t rows, float* out, MlpScratch& s) {
  const int64_t ffn = m.gate.rows();
  Grow(s.gate, rows * ffn);
  Grow(s.up, rows * ffn);
  Linear(x, rows, m.gate, nullptr, s.gate.data());
  Linear(x, rows, m.up, nullptr, s.up.data());
  SwiGlu(s.gate.data(), s.up.data(), rows * ffn, s.gate.data());
  Linear(s.gate.data(), rows, m.down, nullptr, out);
}

absl::StatusOr<MlpWeights> LoadMlp(const Checkpoint& ckpt, int64_t layer,
                                   const std::string& suffix, ComputeType prefer) {
  const std::string p = absl::StrCat("blk.", layer, ".");
  MlpWeights m;
  TANDEM_ASSIGN_OR_RETURN(m.gate, Load(ckpt, p + "ffn_gate" + suffix, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.up, Load(ckpt, p + "ffn_up" + suffix, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.down, Load(ckpt, p + "ffn_down" + suffix, prefer));
  return m;
}

absl::StatusOr<MlpWeights> LoadExpertMlp(const Checkpoint& ckpt, int64_t layer, int64_t expert,
                                         ComputeType prefer) {
  const std::string p = absl::StrCat("blk.", layer, ".");
  MlpWeights m;
  TANDEM_ASSIGN_OR_RETURN(m.gate, LoadExpert(ckpt, p + "ffn_gate_exps", expert, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.up, LoadExpert(ckpt, p + "ffn_up_exps", expert, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.down, LoadExpert(ckpt, p + "ffn_down_exps", expert, prefer));
  return m;
}

}  // namespace tandem::ops
