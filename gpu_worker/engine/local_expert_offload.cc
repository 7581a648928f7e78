#include "gpu_worker/engine/local_expert_offload.h"

#include <vector>

#include "cpu_worker/ops/mlp.h"

namespace tandem {

absl::Status LocalExpertOffload::Submit(int64_t layer, const std::vector<ExpertJob>& jobs) {
  const LayerWeights* lw = &weights_->layers[static_cast<size_t>(layer)];
  pending_ = std::async(std::launch::async, [lw, jobs] {
    ops::MlpScratch scratch;
    std::vector<ops::MlpCall> calls;
    for (const ExpertJob& j : jobs) {
      calls.push_back({&lw->experts[static_cast<size_t>(j.expert)], j.input, j.rows, j.output});
    }
    ops::RunMlps(calls.data(), static_cast<int64_t>(calls.size()), scratch);
  });
  return absl::OkStatus();
}

absl::Status LocalExpertOffload::Collect(int64_t, const std::vector<ExpertJob>&) {
  if (pending_.valid()) pending_.get();
  return absl::OkStatus();
}

}  // namespace tandem
