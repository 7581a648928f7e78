#include "gpu_worker/engine/local_expert_offload.h"

#include <vector>

#include "cpu_worker/ops/elementwise.h"
#include "cpu_worker/ops/linear.h"

namespace tandem {

void RunExpertMlp(const MlpWeights& m, const float* x, int64_t rows, float* out) {
  const int64_t ffn = m.gate.rows();
  std::vector<float> gate(static_cast<size_t>(rows * ffn)), up(static_cast<size_t>(rows * ffn));
  ops::Linear(x, rows, m.gate, nullptr, gate.data());
  ops::Linear(x, rows, m.up, nullptr, up.data());
  ops::SwiGlu(gate.data(), up.data(), rows * ffn, gate.data());
  ops::Linear(gate.data(), rows, m.down, nullptr, out);
}

absl::Status LocalExpertOffload::Submit(int64_t layer, const std::vector<ExpertJob>& jobs) {
  const LayerWeights* lw = &weights_->layers[static_cast<size_t>(layer)];
  pending_ = std::async(std::launch::async, [lw, jobs] {
    for (const ExpertJob& j : jobs) {
      RunExpertMlp(lw->experts[static_cast<size_t>(j.expert)], j.input, j.rows, j.output);
    }
  });
  return absl::OkStatus();
}

absl::Status LocalExpertOffload::Collect(int64_t, const std::vector<ExpertJob>&) {
  if (pending_.valid()) pending_.get();
  return absl::OkStatus();
}

}  // namespace tandem
