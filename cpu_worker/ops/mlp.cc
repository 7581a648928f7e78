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
  const MlpCall call{&m, x, rows, out};
  RunMlps(&call, 1, s);
}

void RunMlps(const MlpCall* calls, int64_t count, MlpScratch& s) {
  int64_t elems = 0;
  for (int64_t c = 0; c < count; ++c) elems += calls[c].rows * calls[c].w->gate.rows();
  Grow(s.gate, elems);
  Grow(s.up, elems);
  thread_local std::vector<LinearCall> linear;
  linear.clear();
  int64_t at = 0;
  for (int64_t c = 0; c < count; ++c) {
    const MlpCall& m = calls[c];
    linear.push_back({m.x, m.rows, &m.w->gate, nullptr, s.gate.data() + at});
    linear.push_back({m.x, m.rows, &m.w->up, nullptr, s.up.data() + at});
    at += m.rows * m.w->gate.rows();
  }
  LinearGroup(linear.data(), static_cast<int64_t>(linear.size()));
  SwiGlu(s.gate.data(), s.up.data(), elems, s.gate.data());
  linear.clear();
  at = 0;
  for (int64_t c = 0; c < count; ++c) {
    const MlpCall& m = calls[c];
    linear.push_back({s.gate.data() + at, m.rows, &m.w->down, nullptr, m.out});
    at += m.rows * m.w->gate.rows();
  }
  LinearGroup(linear.data(), static_cast<int64_t>(linear.size()));
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
