// The Neo family for the planner (online serving): every weight on the GPU;
// the KV of as many sequences as fit in the GPU pool there, the KV of more
// sequences in host memory with their decode attention on the CPU, run as
// Neo's two asymmetric sub-batches when that beats the GPU-only batch.
//
// The steady state of continuous batching is modelled:
//  - each sequence holds prompt + gen/2 tokens of KV on average, which sizes
//    how many sequences each pool holds (the GPU-only batch is what the GPU
//    pool holds: without Neo nothing else can run);
//  - one iteration decodes one token of every running sequence; the
//    requests' prefills (all on the GPU, as in Neo) add prompt work spread
//    over the gen_len iterations of a request's life:
//      ITL = decode iteration + running · prefill(one prompt) / gen_len
//      throughput = running / ITL
//    The planner leaves the prefills out of the sub-batch decision, which is
//    conservative: at run time they join batch-0 and hide more CPU work;
//  - which CPU sequences can run is PlanIteration's decision on sequences of
//    the mean context, so the planner and the scheduler share one rule.
// The GPU figures are rooflines of ModelCost's ops; CPU attention reads the
// KV at the profile's attention bandwidth plus one operator call; the
// D2H of Q/K/V and the H2D of the attention output (which Neo's cost model
// leaves out) are in the simulated step.
#ifndef TANDEM_COORDINATOR_PLANNER_NEO_NEO_PLANNER_H_
#define TANDEM_COORDINATOR_PLANNER_NEO_NEO_PLANNER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "coordinator/planner/neo/neo_iteration.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

struct NeoOptions {
  // Share of GPU memory the engine may use (vLLM's and SwiftLLM's default).
  double gpu_memory_utilization = 0.9;
  // Host memory kept from the CPU KV pool: OS, process, pinned buffers.
  double host_reserve_bytes = 16e9;
  // Rows of one iteration (Neo's max_tokens_in_batch default): bounds the
  // activation memory and the decodes per iteration.
  int64_t max_tokens_in_batch = 3072;
  // GPU-pool batch sizes tried under an SLO (all of them when fewer).
  int grid_points = 48;
};

struct NeoCapacity {
  double weights_bytes = 0;
  double activation_bytes = 0;
  double gpu_kv_bytes = 0;           // the GPU KV pool
  double cpu_kv_bytes = 0;           // the CPU KV pool
  double kv_bytes_per_sequence = 0;  // at the mean context
  int64_t max_gpu_sequences = 0;
  int64_t max_cpu_sequences = 0;
};

// FailedPrecondition when the weights (and activations) do not fit on the
// GPU: Neo keeps every weight there.
absl::StatusOr<NeoCapacity> NeoCapacityFor(const PlanInput& in,
                                           const NeoOptions& o);

// One operating point: `gpu_sequences` with GPU KV and `cpu_sequences`
// offered with CPU KV (PlanIteration admits what it can hide).
struct NeoEvaluation {
  neo::IterationPlan iteration;
  int64_t running = 0;      // sequences decoded per iteration
  int64_t cpu_running = 0;  // of which with CPU attention
  StepGraph graph;          // the decode iteration
  SimResult sim;
  double prefill_one_s = 0;    // one prompt's prefill on the GPU
  double prefill_share_s = 0;  // running · prefill_one / gen_len
  double itl_s = 0;
  double throughput = 0;  // generated tokens per second
};
absl::StatusOr<NeoEvaluation> EvaluateNeo(const PlanInput& in,
                                          int64_t gpu_sequences,
                                          int64_t cpu_sequences);

// The plan (family NEO): the best throughput among the operating points
// (under the ITL SLO when that is the objective). When the GPU-only batch is
// better, the plan has no CPU attention sequences and says so.
absl::StatusOr<FamilyPlan> PlanNeo(const PlanInput& in, const NeoOptions& o);
absl::StatusOr<FamilyPlan> PlanNeo(const PlanInput& in);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_NEO_NEO_PLANNER_H_
