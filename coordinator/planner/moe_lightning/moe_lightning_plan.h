// The MoE-Lightning schedule family's solver: searches (N, μ, A_g, F_g,
// r_w, r_c) with the HRM performance model, fills the Policy (placement
// per layer, batching, KV blocks, prediction, rationale) and simulates
// CGOPipe for a few layers of the chosen policy's decode step.
#ifndef TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_MOE_LIGHTNING_PLAN_H_
#define TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_MOE_LIGHTNING_PLAN_H_

#include "absl/status/statusor.h"
#include "coordinator/planner/moe_lightning/performance_model.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

struct MoeLightningOptions {
  // Performance-model options; model.padded selects MoE-Lightning(p), which
  // pads every prompt to the longest (the variant the paper's tables
  // report). The default, unpadded, is what Tandem runs: Algorithm 2's
  // variable-length batching.
  ml::ModelOptions model;
  // Layers of the decode step built as a CGOPipe graph and simulated (the
  // steady state is read between the first and the last-but-one; every
  // layer of a kind costs the same, so a few stand for all).
  int simulated_layers = 4;
};

// The family's entry point for the policy search (default options).
absl::StatusOr<FamilyPlan> PlanMoeLightning(const PlanInput& in);

// FailedPrecondition when the family cannot run the model on the machine
// (no GPU, the model does not fit at any policy, or no policy meets the ITL
// SLO); InvalidArgument for a missing input or a bad workload.
absl::StatusOr<FamilyPlan> PlanMoeLightning(const PlanInput& in,
                                            const MoeLightningOptions& options);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_MOE_LIGHTNING_PLAN_H_
