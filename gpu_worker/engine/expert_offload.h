// The engine's hook for experts computed outside its own device: the
// cpu_worker (CC experts, through shared memory) or, in tests, a local
// stand-in. Per MoE layer the engine submits the remote experts' work first,
// computes its own experts meanwhile, then collects and adds the results,
// so both sides work at once.
#ifndef TANDEM_GPU_WORKER_ENGINE_EXPERT_OFFLOAD_H_
#define TANDEM_GPU_WORKER_ENGINE_EXPERT_OFFLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace tandem {

// One expert's share of a layer: the rows routed to it.
struct ExpertJob {
  int32_t expert = 0;
  int64_t rows = 0;
  const float* input = nullptr;  // [rows, hidden]
  float* output = nullptr;       // [rows, hidden], filled by Collect
};

class ExpertOffload {
 public:
  virtual ~ExpertOffload() = default;
  // True if expert `e` of `layer` is computed by this offload.
  virtual bool IsRemote(int64_t layer, int64_t expert) const = 0;
  // Starts the jobs of one layer. Inputs must stay valid until Collect.
  virtual absl::Status Submit(int64_t layer, const std::vector<ExpertJob>& jobs) = 0;
  // Waits for the jobs of the last Submit and writes their outputs.
  // kUnavailable when the worker behind the offload is gone.
  virtual absl::Status Collect(int64_t layer, const std::vector<ExpertJob>& jobs) = 0;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_EXPERT_OFFLOAD_H_
