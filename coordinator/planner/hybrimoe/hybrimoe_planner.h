// The HybriMoE family for the planner: everything but the routed experts on
// the GPU (attention, KV, routers, shared experts, embedding, LM head), a
// per-layer GPU expert cache filling the rest of the GPU, and each layer's
// activated experts split between the GPU and the CPU by SplitExperts.
//
// The prediction uses expected routing, not a trace:
//  - a step of T tokens activates A = E·(1 − (1 − k/E)^T) distinct experts
//    (ModelCost::ExpectedActiveExperts) with T·k/A tokens each;
//  - the cache hit rate is (cache slots + prefetched experts) / E. Under
//    uniform routing no expert is likelier than another, so the score cache
//    holds, in expectation, a random subset; real routing is skewed, so this
//    is a lower bound on the hits HybriMoE gets (its decode gain comes from
//    that skew, which a planner without a trace cannot know);
//  - the prefetcher loads p experts of the next layer per layer (p = 0 or 1
//    tried), each on the link behind the layer's on-demand loads.
// Prefill runs in chunks of whole prompts (prefill_chunk_tokens) through the
// same split; a chunk's tokens make every expert worth running on the GPU.
#ifndef TANDEM_COORDINATOR_PLANNER_HYBRIMOE_HYBRIMOE_PLANNER_H_
#define TANDEM_COORDINATOR_PLANNER_HYBRIMOE_HYBRIMOE_PLANNER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/experts/expert_split.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

struct HybriMoeOptions {
  double alpha = 0.5;               // cache score decay (HybriMoE's default)
  double gpu_reserve_bytes = 2e9;   // CUDA context and allocator slack
  double host_reserve_bytes = 8e9;  // OS and process
  int64_t prefill_chunk_tokens = 4096;
  int max_prefetch = 1;     // experts of the next layer prefetched per layer
  int64_t max_batch = 512;  // the largest batch tried (powers of two up to it)
  // Fixed batch size; 0 = search.
  int64_t batch_size = 0;
};

// What lives where for a batch size.
struct HybriMoeLayout {
  int64_t batch = 0;
  int prefetch = 0;
  int cache_slots = 0;     // per MoE layer
  double gpu_weights = 0;  // non-expert weights
  double gpu_kv = 0;
  double gpu_activations = 0;
  double gpu_expert_buffers = 0;  // on-demand staging (2) + prefetch buffers
  double gpu_cache = 0;           // cache_slots · expert bytes · MoE layers
  double gpu_reserve = 0;
  double host_bytes = 0;  // every expert (the CPU computes from it) + reserve
  bool fits = false;
  std::string why_not;  // when !fits
  double gpu_total() const {
    return gpu_weights + gpu_kv + gpu_activations + gpu_expert_buffers +
           gpu_cache + gpu_reserve;
  }
};

// FailedPrecondition for dense models or a profile without a GPU.
absl::StatusOr<HybriMoeLayout> HybriMoeLayoutFor(const PlanInput& in,
                                                 const HybriMoeOptions& o,
                                                 int64_t batch, int prefetch);

// One simulated step (decode of `batch` sequences, or one prefill chunk of
// `sequences` prompts) under a layout: the graph, its simulation, and the
// split of one layer.
struct HybriMoeStep {
  StepGraph graph;
  SimResult sim;
  experts::ExpertSplit layer_split;
  int active_experts = 0;
  int cached_active = 0;
  int64_t tokens_per_expert = 0;
};
absl::StatusOr<HybriMoeStep> SimulateHybriMoeDecode(
    const PlanInput& in, const HybriMoeLayout& layout);
absl::StatusOr<HybriMoeStep> SimulateHybriMoePrefillChunk(
    const PlanInput& in, const HybriMoeLayout& layout, int64_t sequences);

// The plan (family HYBRIMOE): the batch size and prefetch with the best
// predicted throughput (under the ITL SLO when that is the objective).
absl::StatusOr<FamilyPlan> PlanHybriMoe(const PlanInput& in,
                                        const HybriMoeOptions& o);
absl::StatusOr<FamilyPlan> PlanHybriMoe(const PlanInput& in);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_HYBRIMOE_HYBRIMOE_PLANNER_H_
