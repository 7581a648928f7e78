// HybriMoE's score-based GPU expert cache ("Minus Recent Score", related.md
// §2): per expert a score S ← α·routing score + (1−α)·S, updated every step
// for every expert of the layer (an expert the step did not route to has
// routing score 0, so its score decays by 1−α); each layer has its own slot
// budget and evicts its lowest-scored resident. The highest-scored experts
// that are not resident are what the prefetcher loads for the next layer.
//
// Choices where the source is vague:
//  - The routing score of an expert for a step is whatever the caller
//    aggregates (the worker uses the mean gate probability over the step's
//    tokens; HybriMoE's code keeps only the top-p of them, p = 12).
//  - Admitting an expert into a full layer evicts the lowest-scored resident
//    only when the newcomer scores strictly higher; otherwise the newcomer is
//    not kept (no churn between equals).
//  - Ties between scores go to the lower expert index, so the cache is
//    deterministic.
//
// Bookkeeping only: no planner types, no tensors. The gpu_worker's expert
// cache keeps the weights and asks this class what to keep.
#ifndef TANDEM_COMMON_EXPERTS_EXPERT_SCORE_CACHE_H_
#define TANDEM_COMMON_EXPERTS_EXPERT_SCORE_CACHE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::experts {

class ExpertScoreCache {
 public:
  // HybriMoE's default decay.
  static constexpr double kDefaultAlpha = 0.5;

  // InvalidArgument unless layers >= 1, experts >= 1, 0 <= capacity <=
  // experts and 0 < alpha <= 1.
  static absl::StatusOr<ExpertScoreCache> Create(int num_layers,
                                                 int num_experts,
                                                 int capacity_per_layer,
                                                 double alpha = kDefaultAlpha);

  int num_layers() const { return num_layers_; }
  int num_experts() const { return num_experts_; }
  int capacity_per_layer() const { return capacity_; }
  double alpha() const { return alpha_; }

  // One step's routing scores of `layer`, one per expert.
  absl::Status Update(int layer, absl::Span<const double> routing_scores);

  double score(int layer, int expert) const;   // 0 out of range
  bool IsCached(int layer, int expert) const;  // false out of range
  int size(int layer) const;                   // residents of the layer
  std::vector<int> Cached(int layer) const;    // ascending expert index

  struct AdmitResult {
    bool admitted = false;       // the expert is resident now
    std::optional<int> evicted;  // the resident it displaced
  };
  // An expert that has just been loaded to the GPU asks to stay.
  absl::StatusOr<AdmitResult> Admit(int layer, int expert);

  // Evicts the layer's lowest-scored resident; nullopt when it has none.
  absl::StatusOr<std::optional<int>> Evict(int layer);

  // The `count` highest-scored experts of `layer` that are not resident,
  // best first: what to prefetch while the previous layer runs.
  absl::StatusOr<std::vector<int>> PrefetchCandidates(int layer,
                                                      int count) const;

 private:
  ExpertScoreCache(int layers, int experts, int capacity, double alpha);
  absl::Status CheckLayer(int layer) const;
  // The resident with the lowest score (ties: lowest index); -1 if none.
  int LowestResident(int layer) const;
  size_t at(int layer, int expert) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(num_experts_) +
           static_cast<size_t>(expert);
  }

  int num_layers_;
  int num_experts_;
  int capacity_;
  double alpha_;
  std::vector<double> scores_;   // [layers * experts]
  std::vector<uint8_t> cached_;  // [layers * experts]
  std::vector<int> sizes_;       // [layers]
};

}  // namespace tandem::experts

#endif  // TANDEM_COMMON_EXPERTS_EXPERT_SCORE_CACHE_H_
