// The MoE-Lightning policy search (§4.2): over (N, μ, A_g, F_g, r_w, r_c),
// the best point for the workload's objective under the GPU and CPU memory
// limits. The paper solves a MILP; this is the digest's "practical
// solver": a grid over μ and N/μ for each (A_g, F_g), and for each grid
// point an exact solve of the continuous fractions, since every time term
// is piecewise-linear in r_w and memory is linear in it.
#ifndef TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_ML_POLICY_SEARCH_H_
#define TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_ML_POLICY_SEARCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/moe_lightning/performance_model.h"

namespace tandem::planner::ml {

struct SearchOutcome {
  PolicyPoint point;
  Estimate estimate;
  int64_t points_evaluated = 0;  // full evaluations (for the speed test)
};

// 1..8, then rising by ~15% a step (at least 1) up to `max` inclusive:
// fine where small values matter (μ of long prompts), coarse where a
// 15% step changes little.
std::vector<int64_t> SearchGrid(int64_t max);

// The paper's objective (the digest's reading of it): maximise
// N·n / (T_prefill + n·T_step), offline; with kThroughputUnderItlSlo the
// same over the points whose inter-token latency (one decode step, l·T +
// LM head) is within the SLO. Ties (within 1e-9) keep the first point in
// the order A_g = 0 before 1, F_g = 1 before 0, then μ and N ascending, so
// the smallest batch that reaches a plateau wins.
// FailedPrecondition when no point fits the memories (the message gives
// the smallest need) or, under an SLO, none meets it (it gives the fastest
// step found).
absl::StatusOr<SearchOutcome> SearchMoeLightningPolicy(
    const PerformanceModel& model);

}  // namespace tandem::planner::ml

#endif  // TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_ML_POLICY_SEARCH_H_
