// The ScheInfer schedule family's solver (digest: ScheInfer, Lin et al.):
// every MLP / routed-expert weight split three ways — GG (GPU-resident), CG
// (host-resident, copied over PCIe each step, computed on the GPU), CC
// (host-resident, computed on the CPU) — with attention, KV and everything
// else on the GPU, and per prefill n_g prompt tokens run on the GPU with the
// CC bytes copied over as CG′.
//
// For a batch size B the solver
//   1. derives ScheInfer's linear cost models from the hardware profile at
//      the decode rows (cost_model.h),
//   2. Stage 1: for every r_GG on the n_G grid, the best r_CG by
//      breakpoints (rate_solver.h), giving f(r_GG) per layer class,
//   3. Stage 2: hands the GPU memory left after the resident part, the KV
//      cache, activations and the CG staging buffer to layers greedily
//      (rate_solver.h),
//   4. simulates the whole decode step (all layers; per layer attention on
//      the GPU, then ScheInfer's four streams, a sync at the layer end),
//   5. keeps the decode split for prefill and picks n_g (Eq. 15) for a
//      prompt of the workload's average length; prefill runs one prompt at
//      a time (the paper's batch-1 prefill; its activations are the peak).
// PlanScheInfer runs this for every batch size it tries, so it shares what
// does not depend on B (the prefill layers and cost model, the memory
// totals) between them, times the decode and prefill steps on a StreamClock
// (cost_model.h: the simulator's arithmetic, the same doubles, no graph),
// and builds and simulates the decode step's graph only for the batch it
// picks. PlanBatch builds the graph of its batch.
// B is chosen from {1, 2, 4, ...} (up to the workload's max_batch, or 64:
// ScheInfer serves batch 1 or small batches; beyond that the weight-sharing
// pipelines of the other families are the better fit and the search has
// them): the throughput objective takes the best throughput within memory,
// the SLO objective the largest B whose ITL meets the SLO (when none does,
// the lowest-ITL plan, marked as missing it in the rationale, so the search
// can still compare families).
#ifndef TANDEM_COORDINATOR_PLANNER_SCHEINFER_SCHEINFER_PLAN_H_
#define TANDEM_COORDINATOR_PLANNER_SCHEINFER_SCHEINFER_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/scheinfer/cost_model.h"
#include "coordinator/planner/scheinfer/rate_solver.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

// FailedPrecondition when the machine has no GPU, or the GPU cannot hold the
// resident part, one sequence's KV, the activations and the staging buffer,
// or the host cannot hold the CC/CG weights. InvalidArgument for missing or
// invalid inputs.
absl::StatusOr<FamilyPlan> PlanScheInfer(const PlanInput& in);

namespace scheinfer {

struct PlanOptions {
  int grid_steps = kDefaultGridSteps;  // n_G
  int64_t max_batch = 64;              // when the workload sets no max_batch
};

// The plan at one batch size, with the intermediate figures tests and
// `tandem plan` want to show.
struct BatchPlan {
  int64_t batch = 0;
  std::vector<Split> splits;   // per layer
  std::vector<int> levels;     // per layer: r_GG = level / grid_steps
  double gg_budget_bytes = 0;  // what Stage 2 could spend
  double gg_bytes = 0;         // what it spent
  double staging_bytes = 0;    // CG / CG′ staging the plan needs
  double gpu_bytes = 0;        // resident + KV + activations + staging + GG
  double host_bytes = 0;       // CC + CG weights
  StepGraph decode_step;
  SimResult decode_sim;
  double decode_step_s = 0;
  Regime regime = Regime::kCopyBound;  // of most streamed layers; see all_gg
  bool all_gg = false;                 // every layer fully GPU-resident
  int64_t prompt_tokens = 0;           // T of the modelled prefill
  int64_t prefill_gpu_tokens = 0;      // n_g
  double prefill_one_s = 0;            // one prompt, whole model
  // The same with n_g = 0 (token assignment off).
  double prefill_one_cpu_only_s = 0;
  double prefill_mlp_s = 0;           // its MLP part (Σ t_fin) at n_g
  double prefill_mlp_cpu_only_s = 0;  // the same with n_g = 0
  double throughput = 0;  // B·gen_len / (B·prefill_one + gen_len·step)
};

absl::StatusOr<BatchPlan> PlanBatch(const PlanInput& in, int64_t batch,
                                    const PlanOptions& options = {});

absl::StatusOr<FamilyPlan> PlanScheInfer(const PlanInput& in,
                                         const PlanOptions& options);

}  // namespace scheinfer
}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SCHEINFER_SCHEINFER_PLAN_H_
