// Klotski's correlation-aware expert prefetch (ASPLOS'25, papers/klotski.md
// §3): a per-layer-pair table of expert transitions. C[l][i][j] counts how
// often a token chose expert i at layer l and expert j at layer l + 1; with
// top-k routing every one of a token's k×k (i, j) pairs is counted, as in
// Klotski's code. While layer l + 1's attention runs, layer l's routing is
// known, so the table predicts which experts of layer l + 1 the step's tokens
// will pick, and the prefetcher loads those first.
//
// Prediction for layer l + 1 given the experts activated at layer l, with
// tokens_i tokens each:
//   score_j = Σ_i tokens_i · C[l][i][j] / rowsum_i      (rows with no history
//                                                        are skipped)
// i.e. each token votes with its experts' observed next-layer distribution
// (Klotski's "add the tendencies over all tokens"). The best `count` experts
// are returned, best first, in three tiers: experts with a positive score
// (ties to the lower index), then experts by the global popularity of layer
// l + 1 (how often layer l + 1 chose them; ties to the lower index), then the
// remaining experts in index order. So a cold table still answers.
//
// Choices where the paper is vague:
//  - Klotski votes with each row's top-2 only ("vote[c] += cnt[p] for c in
//    top2(table[l][p])"); we use the whole normalised row, which keeps the
//    information of the tail and needs no k. With a peaked table the two agree
//    on the top entries.
//  - Klotski gathers the table in a warm-up pre-run and refines it online.
//    The table here starts empty (a warm-up is just a run of ObserveStep
//    calls) and learns online; nothing is written back.
//  - Drift: `decay` (0 < decay <= 1) multiplies every count of a layer pair
//    (and the popularity it feeds) by `decay` before each observed step of
//    that pair, so a transition seen s steps ago weighs decay^s. decay = 1
//    (the default) keeps plain counts, as Klotski does; Klotski instead keeps
//    its warm-up counts small so that online updates matter, which a decay
//    near 1 (e.g. 0.999) achieves without a warm-up policy. Decay is applied
//    lazily (a per-pair scale factor, renormalised before it overflows), so a
//    step costs O(tokens·k²), not O(experts²).
//  - Popularity of layer l + 1 is counted from the "to" side of pair l;
//    popularity of layer 0 from the "from" side of pair 0. Observing every
//    consecutive pair of a step thus counts each layer's routing once.
//  - An expert listed twice in one token's top-k is bad input.
//
// Accuracy: RecordOutcome(predicted, actual) keeps running totals of
// |predicted ∩ actual|, |predicted| and |actual| (each list read as a set),
// giving precision and recall (Klotski's Fig. 13 reports the former).
//
// Memory: (layers − 1)·experts² doubles (61 layers × 256 experts ≈ 31 MiB).
// Bookkeeping only: no tensors, no CUDA. Not thread-safe.
#ifndef TANDEM_COMMON_EXPERTS_EXPERT_TRANSITION_TABLE_H_
#define TANDEM_COMMON_EXPERTS_EXPERT_TRANSITION_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::experts {

// One expert activated at a layer this step and the tokens routed to it.
struct ExpertTokens {
  int expert = 0;
  int64_t tokens = 0;
};

// Where a predicted expert's rank came from.
enum class PredictionBasis {
  kTransition,  // a positive transition score
  kPopularity,  // no transition score; the layer's global popularity
  kIndexOrder,  // no history at all
};

struct ScoredExpert {
  int expert = 0;
  double score = 0;  // the transition score (kTransition), else popularity
  PredictionBasis basis = PredictionBasis::kIndexOrder;
};

// Running totals of prediction outcomes.
struct PredictionAccuracy {
  int64_t predicted = 0;  // Σ |predicted|
  int64_t actual = 0;     // Σ |actual|
  int64_t hits = 0;       // Σ |predicted ∩ actual|
  int64_t outcomes = 0;   // RecordOutcome calls
  // hits / predicted; 0 before anything was predicted.
  double precision() const;
  // hits / actual; 0 before anything was activated.
  double recall() const;
};

class ExpertTransitionTable {
 public:
  static constexpr double kNoDecay = 1.0;

  // InvalidArgument unless num_layers >= 1, num_experts >= 1 and
  // 0 < decay <= 1. A one-layer model has no layer pair: every pair call is
  // then InvalidArgument, and PredictByPopularity(0, …) still works.
  static absl::StatusOr<ExpertTransitionTable> Create(int num_layers,
                                                      int num_experts,
                                                      double decay = kNoDecay);

  int num_layers() const { return num_layers_; }
  int num_experts() const { return num_experts_; }
  double decay() const { return decay_; }

  // Learns one step of layer pair (layer, layer + 1): `from` and `to` are the
  // step's routing at the two layers, [tokens, top_k] row-major expert ids,
  // token t's row in `from` matching its row in `to`. Applies the decay once,
  // then counts every (from[t][a], to[t][b]) pair. InvalidArgument (and the
  // table unchanged) for a layer outside [0, num_layers − 1), top_k < 1,
  // sizes that are not tokens·top_k of the same token count, an expert id out
  // of range, or an expert twice in one token's row. No tokens is a no-op
  // (not even the decay: an empty step says nothing about drift).
  absl::Status ObserveStep(int layer, absl::Span<const int> from,
                           absl::Span<const int> to, int top_k);

  // The `count` most likely experts of layer + 1, best first, given the
  // experts activated at `layer` (see the file comment for the score and the
  // fallback tiers). count is capped at num_experts. InvalidArgument for a
  // layer outside [0, num_layers − 1), count < 0, an expert out of range or
  // listed twice, or negative tokens.
  absl::StatusOr<std::vector<int>> Predict(
      int layer, absl::Span<const ExpertTokens> activated, int count) const;
  // Predict with each expert's score and the tier it came from, so a caller
  // (the prefetcher) can keep only the predictions backed by transitions.
  absl::StatusOr<std::vector<ScoredExpert>> PredictScored(
      int layer, absl::Span<const ExpertTokens> activated, int count) const;

  // The `count` most popular experts of `layer` (any layer, including 0),
  // best first, then index order: the prediction when there is no previous
  // layer to condition on. InvalidArgument for a bad layer or count < 0.
  absl::StatusOr<std::vector<int>> PredictByPopularity(int layer,
                                                       int count) const;

  // The decayed count C[layer][from][to] and a layer's decayed popularity;
  // 0 out of range. For tests and diagnostics.
  double Count(int layer, int from_expert, int to_expert) const;
  double Popularity(int layer, int expert) const;

  // Scores one prediction against what the layer then activated; both are
  // read as sets (a duplicate counts once). InvalidArgument for an expert id
  // out of range (nothing recorded).
  absl::Status RecordOutcome(absl::Span<const int> predicted,
                             absl::Span<const int> actual);
  const PredictionAccuracy& accuracy() const { return accuracy_; }

 private:
  ExpertTransitionTable(int layers, int experts, double decay);
  absl::Status CheckPairLayer(int layer) const;
  absl::Status CheckExpert(int expert, const char* what) const;
  // Grows pair `pair`'s scale by 1/decay (renormalising the pair's counts
  // and the popularity it feeds when the scale gets large).
  void AdvanceDecay(int pair);
  // Divides pair `pair`'s stored counts and the popularity it feeds (layer
  // pair + 1, and layer 0 too for pair 0) by its scale, which becomes 1.
  void Renormalise(int pair);
  size_t cell(int pair, int from, int to) const {
    return (static_cast<size_t>(pair) * static_cast<size_t>(num_experts_) +
            static_cast<size_t>(from)) *
               static_cast<size_t>(num_experts_) +
           static_cast<size_t>(to);
  }
  size_t row(int pair, int from) const {
    return static_cast<size_t>(pair) * static_cast<size_t>(num_experts_) +
           static_cast<size_t>(from);
  }
  size_t pop(int layer, int expert) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(num_experts_) +
           static_cast<size_t>(expert);
  }
  // The scale that divides layer `layer`'s stored popularity.
  double PopularityScale(int layer) const;

  int num_layers_;
  int num_experts_;
  double decay_;
  // Stored values are real counts times the pair's scale (lazy decay).
  std::vector<double> counts_;      // [layers − 1, experts, experts]
  std::vector<double> row_sums_;    // [layers − 1, experts]
  std::vector<double> popularity_;  // [layers, experts]
  std::vector<double> scale_;       // [layers − 1]
  PredictionAccuracy accuracy_;
};

}  // namespace tandem::experts

#endif  // TANDEM_COMMON_EXPERTS_EXPERT_TRANSITION_TABLE_H_
