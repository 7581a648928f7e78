#include "common/experts/expert_transition_table.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::experts {
namespace {

// Past this the lazily decayed counts are folded back to real units, long
// before a double overflows (1e300) and with room for a step's increments.
constexpr double kMaxScale = 1e100;

// Ranks by score, descending; ties to the lower expert index.
void SortBest(std::vector<ScoredExpert>& v) {
  std::sort(v.begin(), v.end(),
            [](const ScoredExpert& a, const ScoredExpert& b) {
              if (a.score != b.score) return a.score > b.score;
              return a.expert < b.expert;
            });
}

}  // namespace

double PredictionAccuracy::precision() const {
  return predicted > 0 ? static_cast<double>(hits) / predicted : 0.0;
}

double PredictionAccuracy::recall() const {
  return actual > 0 ? static_cast<double>(hits) / actual : 0.0;
}

ExpertTransitionTable::ExpertTransitionTable(int layers, int experts,
                                             double decay)
    : num_layers_(layers), num_experts_(experts), decay_(decay) {
  const size_t pairs = static_cast<size_t>(layers - 1);
  const size_t e = static_cast<size_t>(experts);
  counts_.assign(pairs * e * e, 0.0);
  row_sums_.assign(pairs * e, 0.0);
  popularity_.assign(static_cast<size_t>(layers) * e, 0.0);
  scale_.assign(pairs, 1.0);
}

absl::StatusOr<ExpertTransitionTable> ExpertTransitionTable::Create(
    int num_layers, int num_experts, double decay) {
  if (num_layers < 1 || num_experts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition table: ", num_layers, " layers and ",
                     num_experts, " experts; both must be >= 1"));
  }
  if (!(decay > 0 && decay <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition table: decay ", decay, " outside (0, 1]"));
  }
  return ExpertTransitionTable(num_layers, num_experts, decay);
}

absl::Status ExpertTransitionTable::CheckPairLayer(int layer) const {
  if (layer < 0 || layer >= num_layers_ - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition table: layer ", layer, " has no next layer (",
                     num_layers_, " layers)"));
  }
  return absl::OkStatus();
}

absl::Status ExpertTransitionTable::CheckExpert(int expert,
                                                const char* what) const {
  if (expert < 0 || expert >= num_experts_) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition table: ", what, " expert ", expert,
                     " outside [0, ", num_experts_, ")"));
  }
  return absl::OkStatus();
}

double ExpertTransitionTable::PopularityScale(int layer) const {
  if (num_layers_ < 2) return 1.0;
  return scale_[static_cast<size_t>(layer == 0 ? 0 : layer - 1)];
}

void ExpertTransitionTable::Renormalise(int pair) {
  const double s = scale_[static_cast<size_t>(pair)];
  const size_t e = static_cast<size_t>(num_experts_);
  for (size_t i = cell(pair, 0, 0); i < cell(pair, 0, 0) + e * e; ++i) {
    counts_[i] /= s;
  }
  for (size_t i = row(pair, 0); i < row(pair, 0) + e; ++i) row_sums_[i] /= s;
  auto fold = [&](int layer) {
    for (size_t i = pop(layer, 0); i < pop(layer, 0) + e; ++i) {
      popularity_[i] /= s;
    }
  };
  fold(pair + 1);
  if (pair == 0) fold(0);
  scale_[static_cast<size_t>(pair)] = 1.0;
}

void ExpertTransitionTable::AdvanceDecay(int pair) {
  if (decay_ >= 1.0) return;
  scale_[static_cast<size_t>(pair)] /= decay_;
  if (scale_[static_cast<size_t>(pair)] > kMaxScale) Renormalise(pair);
}

absl::Status ExpertTransitionTable::ObserveStep(int layer,
                                                absl::Span<const int> from,
                                                absl::Span<const int> to,
                                                int top_k) {
  if (absl::Status s = CheckPairLayer(layer); !s.ok()) return s;
  if (top_k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition table: top_k ", top_k, " < 1"));
  }
  const size_t k = static_cast<size_t>(top_k);
  if (from.size() != to.size() || from.size() % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transition table: ", from.size(), " and ", to.size(),
        " expert ids are not [tokens, ", top_k, "] of one token count"));
  }
  // Validate everything before touching the table.
  for (absl::Span<const int> ids : {from, to}) {
    for (size_t t = 0; t < ids.size(); t += k) {
      for (size_t a = 0; a < k; ++a) {
        if (absl::Status s = CheckExpert(ids[t + a], "routed"); !s.ok()) {
          return s;
        }
        for (size_t b = 0; b < a; ++b) {
          if (ids[t + a] == ids[t + b]) {
            return absl::InvalidArgumentError(
                absl::StrCat("transition table: expert ", ids[t + a],
                             " twice in token ", t / k, "'s top-k"));
          }
        }
      }
    }
  }
  if (from.empty()) return absl::OkStatus();

  AdvanceDecay(layer);
  const double w = scale_[static_cast<size_t>(layer)];
  for (size_t t = 0; t < from.size(); t += k) {
    for (size_t a = 0; a < k; ++a) {
      const int i = from[t + a];
      for (size_t b = 0; b < k; ++b) {
        counts_[cell(layer, i, to[t + b])] += w;
      }
      row_sums_[row(layer, i)] += w * static_cast<double>(k);
      if (layer == 0) popularity_[pop(0, i)] += w;
      popularity_[pop(layer + 1, to[t + a])] += w;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ScoredExpert>> ExpertTransitionTable::PredictScored(
    int layer, absl::Span<const ExpertTokens> activated, int count) const {
  if (absl::Status s = CheckPairLayer(layer); !s.ok()) return s;
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition table: prediction count ", count, " < 0"));
  }
  std::vector<double> score(static_cast<size_t>(num_experts_), 0.0);
  std::vector<uint8_t> seen(static_cast<size_t>(num_experts_), 0);
  for (const ExpertTokens& a : activated) {
    if (absl::Status s = CheckExpert(a.expert, "activated"); !s.ok()) return s;
    if (a.tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transition table: expert ", a.expert, " has ", a.tokens, " tokens"));
    }
    if (seen[static_cast<size_t>(a.expert)]++) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transition table: activated expert ", a.expert, " listed twice"));
    }
  }
  for (const ExpertTokens& a : activated) {
    const double rs = row_sums_[row(layer, a.expert)];
    if (a.tokens == 0 || rs <= 0) continue;
    const double weight = static_cast<double>(a.tokens) / rs;
    for (int j = 0; j < num_experts_; ++j) {
      score[static_cast<size_t>(j)] +=
          weight * counts_[cell(layer, a.expert, j)];
    }
  }

  const int next = layer + 1;
  const double pop_scale = PopularityScale(next);
  std::vector<ScoredExpert> by_transition, by_popularity, by_index;
  for (int j = 0; j < num_experts_; ++j) {
    const double p = popularity_[pop(next, j)] / pop_scale;
    if (score[static_cast<size_t>(j)] > 0) {
      by_transition.push_back(
          {j, score[static_cast<size_t>(j)], PredictionBasis::kTransition});
    } else if (p > 0) {
      by_popularity.push_back({j, p, PredictionBasis::kPopularity});
    } else {
      by_index.push_back({j, 0.0, PredictionBasis::kIndexOrder});
    }
  }
  SortBest(by_transition);
  SortBest(by_popularity);
  std::vector<ScoredExpert> out = std::move(by_transition);
  out.insert(out.end(), by_popularity.begin(), by_popularity.end());
  out.insert(out.end(), by_index.begin(), by_index.end());
  if (out.size() > static_cast<size_t>(count)) {
    out.resize(static_cast<size_t>(count));
  }
  return out;
}

absl::StatusOr<std::vector<int>> ExpertTransitionTable::Predict(
    int layer, absl::Span<const ExpertTokens> activated, int count) const {
  absl::StatusOr<std::vector<ScoredExpert>> scored =
      PredictScored(layer, activated, count);
  if (!scored.ok()) return scored.status();
  std::vector<int> out;
  out.reserve(scored->size());
  for (const ScoredExpert& s : *scored) out.push_back(s.expert);
  return out;
}

absl::StatusOr<std::vector<int>> ExpertTransitionTable::PredictByPopularity(
    int layer, int count) const {
  if (layer < 0 || layer >= num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transition table: layer ", layer, " outside [0, ", num_layers_, ")"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition table: prediction count ", count, " < 0"));
  }
  std::vector<ScoredExpert> v;
  for (int j = 0; j < num_experts_; ++j) {
    v.push_back({j, popularity_[pop(layer, j)], PredictionBasis::kPopularity});
  }
  SortBest(v);  // zero popularity sorts last, in index order
  std::vector<int> out;
  for (size_t n = 0; n < v.size() && n < static_cast<size_t>(count); ++n) {
    out.push_back(v[n].expert);
  }
  return out;
}

double ExpertTransitionTable::Count(int layer, int from_expert,
                                    int to_expert) const {
  if (layer < 0 || layer >= num_layers_ - 1 || from_expert < 0 ||
      from_expert >= num_experts_ || to_expert < 0 ||
      to_expert >= num_experts_) {
    return 0;
  }
  return counts_[cell(layer, from_expert, to_expert)] /
         scale_[static_cast<size_t>(layer)];
}

double ExpertTransitionTable::Popularity(int layer, int expert) const {
  if (layer < 0 || layer >= num_layers_ || expert < 0 ||
      expert >= num_experts_) {
    return 0;
  }
  return popularity_[pop(layer, expert)] / PopularityScale(layer);
}

absl::Status ExpertTransitionTable::RecordOutcome(
    absl::Span<const int> predicted, absl::Span<const int> actual) {
  std::vector<uint8_t> in_predicted(static_cast<size_t>(num_experts_), 0);
  std::vector<uint8_t> in_actual(static_cast<size_t>(num_experts_), 0);
  for (int e : predicted) {
    if (absl::Status s = CheckExpert(e, "predicted"); !s.ok()) return s;
    in_predicted[static_cast<size_t>(e)] = 1;
  }
  for (int e : actual) {
    if (absl::Status s = CheckExpert(e, "actual"); !s.ok()) return s;
    in_actual[static_cast<size_t>(e)] = 1;
  }
  for (size_t e = 0; e < in_actual.size(); ++e) {
    accuracy_.predicted += in_predicted[e];
    accuracy_.actual += in_actual[e];
    accuracy_.hits += in_predicted[e] & in_actual[e];
  }
  ++accuracy_.outcomes;
  return absl::OkStatus();
}

}  // namespace tandem::experts
