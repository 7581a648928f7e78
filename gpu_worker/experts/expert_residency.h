// The per-step decision logic of the gpu_worker's expert cache: which of a
// layer's activated experts run on the GPU from the cache, which are loaded
// to the GPU, which run on the CPU, what is evicted, and what to prefetch for
// the next layer. No tensors and no CUDA: the worker owns the weights and the
// copy streams and carries out the LayerPlan this class returns.
//
// Once per layer and step, in layer order, the worker calls PlanLayer with
// the layer's routing. PlanLayer
//  (a) classifies each activated expert as a hit (resident) or a miss;
//  (b) splits the activated experts between the GPU and the CPU with
//      HybriMoE's SplitExperts (cached first, then by tokens; GPU from the
//      head, CPU from the tail), given the residency and the caller's costs;
//  (c) updates HybriMoE's score cache, S ← α·score + (1 − α)·S for every
//      expert of the layer, and offers each on-demand load to it (Admit: a
//      free slot, or the layer's lowest-scored resident if the load scores
//      strictly higher), which yields the evictions. Loads are offered
//      best-scored first, so a load never displaces one admitted just before
//      it in the same call;
//  (d) feeds Klotski's transition table with the pair (layer − 1, layer) and
//      returns the prefetch list for layer + 1 (rule below);
//  (e) keeps the counters of ExpertResidencyStats.
//
// Prefetch rule (the papers leave the combination open; this is our choice).
// At most `prefetch_budget` experts of layer + 1 per call (the link time the
// worker grants the prefetcher while this layer computes), none for the last
// layer. Candidates, in priority order, skipping residents:
//  1. Klotski: the transition table's prediction for layer + 1 given this
//     layer's activated experts weighted by their tokens, keeping only the
//     experts with a positive transition score and at most `capacity` of
//     them (T). It conditions on this step's actual routing, so it goes
//     first.
//  2. HybriMoE: the score cache's best non-resident experts of layer + 1 with
//     a positive score (the experts that were hot recently).
// A candidate takes a free slot of layer + 1 if there is one. In a full layer
// it may displace the layer's lowest-scored resident (the score cache's
// eviction order), but never a resident that is itself in T (the table
// expects it this step), and a HybriMoE candidate only if it scores strictly
// higher than that resident (the score cache's own admission rule). When the
// lowest-scored resident may not be displaced, prefetching stops for this
// call: every other resident scores at least as high. An empty table and an
// all-zero score cache (a cold start) prefetch nothing rather than guess.
//
// Timing: evictions and admissions describe the cache after this layer's
// experts have run. A load is computed from its staging buffer and, when
// admitted, its weights stay in the slot its eviction freed (the evicted
// expert may be one of this step's GPU hits, so that slot must not be
// overwritten before its compute is done). Prefetches touch only layer + 1,
// whose experts this step has not run yet, so they may start at once.
//
// Transition accuracy: at each PlanLayer(l) the table's top-n
// transition-backed prediction for layer l + 1, n = the number of experts
// activated at l (the next layer activates about as many), is scored against
// what PlanLayer(l + 1) then activates. It measures the table, not the
// prefetcher (whose precision is prefetch_used / prefetch_issued).
//
// Not thread-safe: one instance per worker, driven by its layer loop.
#ifndef TANDEM_GPU_WORKER_EXPERTS_EXPERT_RESIDENCY_H_
#define TANDEM_GPU_WORKER_EXPERTS_EXPERT_RESIDENCY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/experts/expert_score_cache.h"
#include "common/experts/expert_split.h"
#include "common/experts/expert_transition_table.h"
#include "gpu_worker/experts/expert_residency_stats.h"

namespace tandem {

struct ExpertResidencyOptions {
  int num_layers = 0;
  int num_experts = 0;         // routed experts per layer
  int capacity_per_layer = 0;  // GPU cache slots per layer
  double alpha = experts::ExpertScoreCache::kDefaultAlpha;
  double transition_decay = experts::ExpertTransitionTable::kNoDecay;
  int prefetch_budget = 1;  // experts of layer + 1 prefetched per call
};

// One expert activated at a layer this step.
struct ExpertActivation {
  int expert = 0;
  int64_t tokens = 0;  // tokens routed to it this step, >= 1
  // This step's routing score aggregate for the score cache, finite and
  // >= 0; SummarizeRouting uses the mean gate probability over the step's
  // tokens (0 for the tokens that did not pick it).
  double score = 0;
};

// A layer's routing for one step.
struct LayerRouting {
  // Each activated expert once. Experts not listed have score 0 this step.
  std::vector<ExpertActivation> activated;
  // Optional: the per-token choices, [tokens, top_k] row-major, so that the
  // transition table learns the pair (layer − 1, layer) when the previous
  // PlanLayer call was layer − 1 of the same step with the same tokens. When
  // given, its token counts must match `activated`. Empty: not learned.
  absl::Span<const int> token_experts;
  int top_k = 0;
};

// What the worker does for one layer this step.
struct LayerPlan {
  int layer = 0;
  std::vector<int> gpu_hits;   // resident, computed on the GPU; run order
  std::vector<int> gpu_loads;  // not resident, loaded and computed on the
                               // GPU; run order (= link order)
  std::vector<int> cpu;        // computed on the CPU; run order
  std::vector<int> admitted;   // the gpu_loads that stay resident
  std::vector<int> evictions;  // residents of `layer` that lose their slot
  std::vector<int> prefetch;   // experts of layer + 1 to load now, best first
  std::vector<int> prefetch_evictions;  // residents of layer + 1 displaced
  experts::ExpertSplit split;           // the split with its predicted timings
};

// Counts the tokens and the mean gate probability per expert of one step's
// routing: ids and weights are [tokens, top_k] row-major; empty weights give
// every activated expert score tokens / total tokens. Experts come out in
// index order. InvalidArgument for bad shapes, an id out of range, an expert
// twice in a token's row, or a weight that is negative or not finite.
absl::StatusOr<std::vector<ExpertActivation>> SummarizeRouting(
    int num_experts, int top_k, absl::Span<const int> ids,
    absl::Span<const float> weights = {});

class ExpertResidency {
 public:
  // InvalidArgument unless num_layers >= 1, num_experts >= 1,
  // 0 <= capacity_per_layer <= num_experts, 0 < alpha <= 1,
  // 0 < transition_decay <= 1 and prefetch_budget >= 0.
  static absl::StatusOr<ExpertResidency> Create(
      const ExpertResidencyOptions& options);

  const ExpertResidencyOptions& options() const { return options_; }

  // Plans one layer of a step (see the file comment). InvalidArgument, with
  // no state changed, for a layer out of range; an activated expert out of
  // range, listed twice, with tokens < 1 or a score negative or not finite;
  // token_experts of a bad shape, with a bad id or disagreeing with
  // `activated`; or costs SplitExperts rejects.
  absl::StatusOr<LayerPlan> PlanLayer(int layer, const LayerRouting& routing,
                                      const experts::ExpertCosts& costs);

  bool IsResident(int layer, int expert) const {
    return cache_.IsCached(layer, expert);
  }
  std::vector<int> Resident(int layer) const { return cache_.Cached(layer); }

  // The counters, per layer and in total, and the table's accuracy.
  ExpertResidencyStats Stats() const;
  // Stats() as Prometheus text; see RenderPrometheus in the stats header.
  std::string RenderPrometheus(absl::string_view prefix = "tandem_expert",
                               absl::string_view labels = "") const;

  const experts::ExpertScoreCache& score_cache() const { return cache_; }
  const experts::ExpertTransitionTable& transitions() const { return table_; }

 private:
  ExpertResidency(const ExpertResidencyOptions& options,
                  experts::ExpertScoreCache cache,
                  experts::ExpertTransitionTable table);

  absl::Status Validate(int layer, const LayerRouting& routing) const;
  // Marks `expert` of `layer` as no longer resident in the prefetch flags and
  // counts the eviction (and a wasted prefetch).
  void NoteEviction(int layer, int expert);
  // The lowest-scored resident of `layer` (ties: lowest index), -1 if none:
  // the expert ExpertScoreCache::Evict and Admit would displace.
  int LowestResident(int layer) const;
  // Fills plan->prefetch for layer + 1 (see the file comment).
  absl::Status Prefetch(int layer,
                        absl::Span<const experts::ExpertTokens> activated,
                        LayerPlan* plan);
  size_t at(int layer, int expert) const {
    return static_cast<size_t>(layer) *
               static_cast<size_t>(options_.num_experts) +
           static_cast<size_t>(expert);
  }

  ExpertResidencyOptions options_;
  experts::ExpertScoreCache cache_;
  experts::ExpertTransitionTable table_;
  std::vector<uint8_t> prefetched_;  // [layers * experts] unused prefetches
  std::vector<LayerResidencyStats> stats_;  // [layers]

  // The previous PlanLayer call: its layer and token routing (for the
  // transition pair), and the table's prediction for the layer after it.
  int last_layer_ = -1;
  std::vector<int> last_token_experts_;  // [tokens, last_top_k_]
  int last_top_k_ = 0;
  std::vector<int> pending_prediction_;  // for layer last_layer_ + 1
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_EXPERTS_EXPERT_RESIDENCY_H_
