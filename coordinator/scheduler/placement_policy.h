// Where a request's KV goes when it is admitted (Neo's partial offloading):
// a request whose KV is on the CPU pool runs its decode attention on the CPU.
// The choice is made at every admission, including re-admission after a
// preemption, so a preempted request may come back on the other pool.
#ifndef TANDEM_COORDINATOR_SCHEDULER_PLACEMENT_POLICY_H_
#define TANDEM_COORDINATOR_SCHEDULER_PLACEMENT_POLICY_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "coordinator/scheduler/block_manager.h"
#include "coordinator/scheduler/request.h"

namespace tandem::sched {

struct PlacementContext {
  const BlockManager* blocks = nullptr;
  // Configured pools big enough to hold the request's current tokens (prompt
  // plus any generated before a preemption); never empty when asked.
  absl::Span<const KvPool> candidates;
  int64_t blocks_now = 0;   // blocks its first chunk (this step) needs
  int64_t blocks_full = 0;  // blocks for its current tokens plus one
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  // The pool to admit `request` on, or nullopt to leave it waiting (the
  // scheduler then stops admitting this step: admission is FCFS). A returned
  // pool must be a candidate with at least `blocks_now` free blocks;
  // otherwise the scheduler treats the answer as nullopt.
  virtual std::optional<KvPool> ChoosePool(
      const Request& request, const PlacementContext& ctx) const = 0;
};

// GPU first, CPU when the GPU is getting full (Neo's rule, simplified):
//  1. GPU, if the whole current sequence (+1) fits while GPU usage stays at
//     or under `gpu_watermark` — room is left for running requests to grow;
//  2. else CPU, if its free blocks hold the whole current sequence (+1);
//  3. else GPU, if the first chunk fits (vLLM's rule: may later preempt);
//  4. else CPU, if the first chunk fits;
//  5. else wait.
// Without a CPU pool this is exactly vLLM's admission (steps 1 and 3).
class DefaultPlacementPolicy : public PlacementPolicy {
 public:
  explicit DefaultPlacementPolicy(double gpu_watermark = 0.95)
      : gpu_watermark_(gpu_watermark) {}
  std::optional<KvPool> ChoosePool(const Request& request,
                                   const PlacementContext& ctx) const override;

 private:
  double gpu_watermark_;
};

// Always one pool (when it is a candidate with room): for tests, and for
// deployments that pin all KV to one side.
class FixedPlacementPolicy : public PlacementPolicy {
 public:
  explicit FixedPlacementPolicy(KvPool pool) : pool_(pool) {}
  std::optional<KvPool> ChoosePool(const Request& request,
                                   const PlacementContext& ctx) const override;

 private:
  KvPool pool_;
};

}  // namespace tandem::sched

#endif  // TANDEM_COORDINATOR_SCHEDULER_PLACEMENT_POLICY_H_
