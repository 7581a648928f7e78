// Klotski's constraint-sensitive planner (paper §2): for a batch size bs,
// the smallest group size n for which the four deadlines hold in both
// phases and the group fits the memory model; the step is then built as a
// StepGraph and simulated for the prediction.
//
// Choices where the paper is vague:
//  - Both phases are checked; decode is the binding one (its attention is
//    ~500x shorter than prefill's for the same expert transfers).
//  - bs: the paper sweeps 4–64 without a rule; we plan each of 4, 8, 16, 32,
//    64 (capped by the workload's max_batch) and keep the best predicted
//    throughput, or the caller fixes it (KlotskiOptions::per_batch_size).
//  - When no n within memory meets the deadlines, the largest n that fits is
//    taken, as the paper's users cap n by hand after an OOM; the plan says
//    so (bubble_free = false) and its prediction, from the simulator, shows
//    the bubbles.
#ifndef TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_PLANNER_H_
#define TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_PLANNER_H_

#include "absl/status/statusor.h"
#include "coordinator/planner/klotski/klotski_inequalities.h"
#include "coordinator/planner/klotski/klotski_model.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

struct KlotskiSolution {
  int bs = 0;
  int n = 0;
  bool bubble_free = false;  // (I)–(IV) hold in both phases at n
  KlotskiMemory memory;
  KlotskiCosts decode;
  KlotskiCosts prefill;
  KlotskiCheck decode_check;
  KlotskiCheck prefill_check;
};

// The n for one batch size. FailedPrecondition when even n = 1 does not fit
// or the model/profile cannot run Klotski; InvalidArgument for bad inputs.
absl::StatusOr<KlotskiSolution> SolveKlotskiGroup(const PlanInput& in,
                                                  const KlotskiOptions& o,
                                                  int bs);

// The whole plan (family KLOTSKI). Under the ITL-SLO objective, plans whose
// decode step exceeds the SLO are dropped (every token waits for all n
// batches); FailedPrecondition when none is left.
absl::StatusOr<FamilyPlan> PlanKlotski(const PlanInput& in,
                                       const KlotskiOptions& o);
absl::StatusOr<FamilyPlan> PlanKlotski(const PlanInput& in);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_PLANNER_H_
