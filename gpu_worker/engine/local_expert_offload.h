// An ExpertOffload that computes its experts in this process with the same
// kernels, on a thread of its own: the reference the cross-process offload
// is tested against, and a test of the engine's submit/compute/collect order.
#ifndef TANDEM_GPU_WORKER_ENGINE_LOCAL_EXPERT_OFFLOAD_H_
#define TANDEM_GPU_WORKER_ENGINE_LOCAL_EXPERT_OFFLOAD_H_

#include <functional>
#include <future>
#include <vector>

#include "gpu_worker/engine/expert_offload.h"
#include "gpu_worker/engine/model_weights.h"

namespace tandem {

class LocalExpertOffload : public ExpertOffload {
 public:
  // `weights` must outlive this object; `remote(layer, expert)` picks the
  // experts it computes.
  LocalExpertOffload(const ModelWeights* weights,
                     std::function<bool(int64_t, int64_t)> remote)
      : weights_(weights), remote_(std::move(remote)) {}

  bool IsRemote(int64_t layer, int64_t expert) const override { return remote_(layer, expert); }
  absl::Status Submit(int64_t layer, const std::vector<ExpertJob>& jobs) override;
  absl::Status Collect(int64_t layer, const std::vector<ExpertJob>& jobs) override;

 private:
  const ModelWeights* weights_;
  std::function<bool(int64_t, int64_t)> remote_;
  std::future<void> pending_;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_LOCAL_EXPERT_OFFLOAD_H_
