// Neo's two asymmetric sub-batches for one step of the service: the step's
// sequences as the scheduler chose them, reordered batch-0 first, with the
// sequences per sub-batch (StepPlan.micro_batch_sizes). The decision is
// PlanIteration's (neo_iteration.h) with the planner's cost functions on the
// profiled machine (neo_costs.h), so the planner and the service share one
// rule.
//
// Where the service differs from Neo: the scheduler has already admitted
// the step's sequences and reserved their KV, so a CPU decode that
// PlanIteration would defer runs anyway, in batch-1 (unhidden, as its
// starvation guard runs them); and when the GPU-only plan wins, the step
// runs as one batch, its CPU decodes' attention overlapping the GPU's
// attention only. A prefill chunk of a request whose KV is on the CPU pool
// goes to batch-0 like every prefill (its attention still runs on the CPU).
#ifndef TANDEM_COORDINATOR_PLANNER_NEO_NEO_SUB_BATCHES_H_
#define TANDEM_COORDINATOR_PLANNER_NEO_NEO_SUB_BATCHES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/hardware_profile.h"
#include "common/model_config.h"

namespace tandem::planner {

// One sequence of the step.
struct StepSequenceShape {
  int64_t tokens = 0;     // this step's tokens (more than one: a prefill chunk)
  int64_t start_pos = 0;  // tokens already in its KV
  bool cpu_kv = false;    // its KV, and so its attention, on the CPU pool
};

struct StepSubBatches {
  std::vector<size_t> order;   // indices into the step's sequences, batch-0 first
  std::vector<int64_t> sizes;  // sequences per sub-batch; empty: one batch
};

class NeoSubBatcher {
 public:
  // FailedPrecondition for a profile without the GPU and link figures Neo's
  // costs need, InvalidArgument without the CPU's attention bandwidth.
  static absl::StatusOr<std::unique_ptr<NeoSubBatcher>> Create(const ModelConfig& config,
                                                               const HardwareProfile& hw);
  ~NeoSubBatcher();

  // The step's order and sub-batches; one batch when there is no CPU
  // decode or the GPU-only plan wins.
  absl::StatusOr<StepSubBatches> Split(absl::Span<const StepSequenceShape> step) const;

 private:
  struct State;
  explicit NeoSubBatcher(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_NEO_NEO_SUB_BATCHES_H_
