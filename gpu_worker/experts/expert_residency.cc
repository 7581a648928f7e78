#include "gpu_worker/experts/expert_residency.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

using experts::ExpertCosts;
using experts::ExpertScoreCache;
using experts::ExpertSplit;
using experts::ExpertTokens;
using experts::ExpertTransitionTable;
using experts::ExpertWork;
using experts::PredictionBasis;
using experts::ScoredExpert;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("expert residency: ", what));
}

// Checks [tokens, top_k] routing ids: shape, range, no expert twice in a
// row. Counts the tokens per expert into `counts` ([num_experts]).
absl::Status CheckTokenRouting(int num_experts, int top_k,
                               absl::Span<const int> ids,
                               std::vector<int64_t>& counts) {
  if (top_k < 1) return Invalid(absl::StrCat("top_k ", top_k, " < 1"));
  const size_t k = static_cast<size_t>(top_k);
  if (ids.size() % k != 0) {
    return Invalid(
        absl::StrCat(ids.size(), " routed ids are not [tokens, ", top_k, "]"));
  }
  counts.assign(static_cast<size_t>(num_experts), 0);
  for (size_t t = 0; t < ids.size(); t += k) {
    for (size_t a = 0; a < k; ++a) {
      const int e = ids[t + a];
      if (e < 0 || e >= num_experts) {
        return Invalid(absl::StrCat("routed expert ", e, " outside [0, ",
                                    num_experts, ")"));
      }
      for (size_t b = 0; b < a; ++b) {
        if (ids[t + b] == e) {
          return Invalid(absl::StrCat("expert ", e, " twice in token ", t / k,
                                      "'s top-k"));
        }
      }
      ++counts[static_cast<size_t>(e)];
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ExpertActivation>> SummarizeRouting(
    int num_experts, int top_k, absl::Span<const int> ids,
    absl::Span<const float> weights) {
  if (num_experts < 1) {
    return Invalid(absl::StrCat(num_experts, " experts"));
  }
  std::vector<int64_t> counts;
  if (absl::Status s = CheckTokenRouting(num_experts, top_k, ids, counts);
      !s.ok()) {
    return s;
  }
  if (!weights.empty() && weights.size() != ids.size()) {
    return Invalid(absl::StrCat(weights.size(), " gate weights for ",
                                ids.size(), " routed ids"));
  }
  std::vector<double> sums(static_cast<size_t>(num_experts), 0.0);
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0) {
      return Invalid(absl::StrCat("gate weight ", weights[i]));
    }
    sums[static_cast<size_t>(ids[i])] += weights[i];
  }
  const double tokens =
      static_cast<double>(ids.size() / static_cast<size_t>(top_k));
  std::vector<ExpertActivation> out;
  for (int e = 0; e < num_experts; ++e) {
    const int64_t n = counts[static_cast<size_t>(e)];
    if (n == 0) continue;
    const double total =
        weights.empty() ? static_cast<double>(n) : sums[static_cast<size_t>(e)];
    out.push_back({e, n, total / tokens});
  }
  return out;
}

ExpertResidency::ExpertResidency(const ExpertResidencyOptions& options,
                                 ExpertScoreCache cache,
                                 ExpertTransitionTable table)
    : options_(options),
      cache_(std::move(cache)),
      table_(std::move(table)),
      prefetched_(static_cast<size_t>(options.num_layers) *
                      static_cast<size_t>(options.num_experts),
                  0),
      stats_(static_cast<size_t>(options.num_layers)) {}

absl::StatusOr<ExpertResidency> ExpertResidency::Create(
    const ExpertResidencyOptions& o) {
  if (o.prefetch_budget < 0) {
    return Invalid(absl::StrCat("prefetch budget ", o.prefetch_budget, " < 0"));
  }
  absl::StatusOr<ExpertScoreCache> cache = ExpertScoreCache::Create(
      o.num_layers, o.num_experts, o.capacity_per_layer, o.alpha);
  if (!cache.ok()) return cache.status();
  absl::StatusOr<ExpertTransitionTable> table = ExpertTransitionTable::Create(
      o.num_layers, o.num_experts, o.transition_decay);
  if (!table.ok()) return table.status();
  return ExpertResidency(o, *std::move(cache), *std::move(table));
}

absl::Status ExpertResidency::Validate(int layer,
                                       const LayerRouting& routing) const {
  const int num_experts = options_.num_experts;
  if (layer < 0 || layer >= options_.num_layers) {
    return Invalid(absl::StrCat("layer ", layer, " outside [0, ",
                                options_.num_layers, ")"));
  }
  std::vector<int64_t> tokens(static_cast<size_t>(num_experts), 0);
  for (const ExpertActivation& a : routing.activated) {
    if (a.expert < 0 || a.expert >= num_experts) {
      return Invalid(absl::StrCat("activated expert ", a.expert,
                                  " outside [0, ", num_experts, ")"));
    }
    if (tokens[static_cast<size_t>(a.expert)] != 0) {
      return Invalid(absl::StrCat("expert ", a.expert, " activated twice"));
    }
    if (a.tokens < 1) {
      return Invalid(absl::StrCat("activated expert ", a.expert, " has ",
                                  a.tokens, " tokens"));
    }
    if (!std::isfinite(a.score) || a.score < 0) {
      return Invalid(
          absl::StrCat("expert ", a.expert, " has routing score ", a.score));
    }
    tokens[static_cast<size_t>(a.expert)] = a.tokens;
  }
  if (routing.token_experts.empty()) return absl::OkStatus();
  std::vector<int64_t> counts;
  if (absl::Status s = CheckTokenRouting(num_experts, routing.top_k,
                                         routing.token_experts, counts);
      !s.ok()) {
    return s;
  }
  for (int e = 0; e < num_experts; ++e) {
    if (counts[static_cast<size_t>(e)] != tokens[static_cast<size_t>(e)]) {
      return Invalid(absl::StrCat("the token routing gives expert ", e, " ",
                                  counts[static_cast<size_t>(e)],
                                  " tokens, the activation list ",
                                  tokens[static_cast<size_t>(e)]));
    }
  }
  return absl::OkStatus();
}

void ExpertResidency::NoteEviction(int layer, int expert) {
  LayerResidencyStats& s = stats_[static_cast<size_t>(layer)];
  ++s.evictions;
  uint8_t& flag = prefetched_[at(layer, expert)];
  if (flag) {
    flag = 0;
    ++s.prefetch_wasted;
  }
}

int ExpertResidency::LowestResident(int layer) const {
  int lowest = -1;
  for (int e = 0; e < options_.num_experts; ++e) {
    if (!cache_.IsCached(layer, e)) continue;
    if (lowest < 0 || cache_.score(layer, e) < cache_.score(layer, lowest)) {
      lowest = e;
    }
  }
  return lowest;
}

absl::StatusOr<LayerPlan> ExpertResidency::PlanLayer(
    int layer, const LayerRouting& routing, const ExpertCosts& costs) {
  if (absl::Status s = Validate(layer, routing); !s.ok()) return s;

  // (b) The split, on the residency before this step changes it. It is pure,
  // so a cost error leaves the state untouched.
  std::vector<ExpertWork> work;
  work.reserve(routing.activated.size());
  for (const ExpertActivation& a : routing.activated) {
    work.push_back({a.expert, a.tokens, cache_.IsCached(layer, a.expert)});
  }
  absl::StatusOr<ExpertSplit> split = experts::SplitExperts(work, costs);
  if (!split.ok()) return split.status();

  // (d, learning) The pair (layer − 1, layer) of this step, and the score of
  // the prediction made for this layer at the previous call.
  const bool follows = layer > 0 && last_layer_ == layer - 1;
  if (follows && !routing.token_experts.empty() &&
      last_top_k_ == routing.top_k &&
      last_token_experts_.size() == routing.token_experts.size()) {
    if (absl::Status s =
            table_.ObserveStep(layer - 1, last_token_experts_,
                               routing.token_experts, routing.top_k);
        !s.ok()) {
      return absl::InternalError(absl::StrCat(
          "expert residency: validated routing rejected: ", s.message()));
    }
  }
  std::vector<int> activated_ids;
  std::vector<ExpertTokens> activated_tokens;
  for (const ExpertActivation& a : routing.activated) {
    activated_ids.push_back(a.expert);
    activated_tokens.push_back({a.expert, a.tokens});
  }
  if (follows) {
    if (absl::Status s =
            table_.RecordOutcome(pending_prediction_, activated_ids);
        !s.ok()) {
      return s;
    }
  }

  // (a, e) Hits, misses and used prefetches.
  LayerResidencyStats& st = stats_[static_cast<size_t>(layer)];
  ++st.plans;
  for (const ExpertActivation& a : routing.activated) {
    ++st.activations;
    if (!cache_.IsCached(layer, a.expert)) {
      ++st.misses;
      continue;
    }
    ++st.hits;
    uint8_t& flag = prefetched_[at(layer, a.expert)];
    if (flag) {
      flag = 0;
      ++st.prefetch_used;
    }
  }

  LayerPlan plan;
  plan.layer = layer;
  for (const auto& g : split->gpu) {
    (g.cached ? plan.gpu_hits : plan.gpu_loads).push_back(g.expert);
  }
  for (const auto& c : split->cpu) plan.cpu.push_back(c.expert);
  st.gpu_computed += static_cast<int64_t>(split->gpu.size());
  st.cpu_computed += static_cast<int64_t>(split->cpu.size());
  st.loads += static_cast<int64_t>(plan.gpu_loads.size());
  plan.split = *std::move(split);

  // (c) Scores, then the loads ask to stay, best-scored first so that a load
  // never displaces one admitted just before it.
  std::vector<double> scores(static_cast<size_t>(options_.num_experts), 0.0);
  for (const ExpertActivation& a : routing.activated) {
    scores[static_cast<size_t>(a.expert)] = a.score;
  }
  if (absl::Status s = cache_.Update(layer, scores); !s.ok()) return s;
  std::vector<int> by_score = plan.gpu_loads;
  std::stable_sort(by_score.begin(), by_score.end(), [&](int a, int b) {
    return cache_.score(layer, a) > cache_.score(layer, b);
  });
  for (int e : by_score) {
    absl::StatusOr<ExpertScoreCache::AdmitResult> r = cache_.Admit(layer, e);
    if (!r.ok()) return r.status();
    if (r->evicted.has_value()) {
      plan.evictions.push_back(*r->evicted);
      NoteEviction(layer, *r->evicted);
    }
    if (r->admitted) {
      plan.admitted.push_back(e);
      ++st.admitted;
    }
  }

  // (d) Prefetch for the next layer.
  if (absl::Status s = Prefetch(layer, activated_tokens, &plan); !s.ok()) {
    return s;
  }

  last_layer_ = layer;
  last_top_k_ = routing.top_k;
  last_token_experts_.assign(routing.token_experts.begin(),
                             routing.token_experts.end());
  return plan;
}

absl::Status ExpertResidency::Prefetch(int layer,
                                       absl::Span<const ExpertTokens> activated,
                                       LayerPlan* plan) {
  pending_prediction_.clear();
  const int next = layer + 1;
  if (next >= options_.num_layers) return absl::OkStatus();
  const int num_experts = options_.num_experts;
  const int capacity = options_.capacity_per_layer;

  absl::StatusOr<std::vector<ScoredExpert>> predicted =
      table_.PredictScored(layer, activated, num_experts);
  if (!predicted.ok()) return predicted.status();
  std::vector<int> transition;  // transition-backed, best first
  for (const ScoredExpert& p : *predicted) {
    if (p.basis == PredictionBasis::kTransition) transition.push_back(p.expert);
  }
  pending_prediction_.assign(
      transition.begin(),
      transition.begin() + static_cast<std::ptrdiff_t>(
                               std::min(transition.size(), activated.size())));
  if (options_.prefetch_budget == 0 || capacity == 0) return absl::OkStatus();

  // T: the table's top `capacity`; then the score cache's hot experts.
  transition.resize(std::min(transition.size(), static_cast<size_t>(capacity)));
  std::vector<uint8_t> in_t(static_cast<size_t>(num_experts), 0);
  for (int e : transition) in_t[static_cast<size_t>(e)] = 1;
  std::vector<std::pair<int, bool>> candidates;  // (expert, from T)
  for (int e : transition) candidates.push_back({e, true});
  absl::StatusOr<std::vector<int>> hot =
      cache_.PrefetchCandidates(next, num_experts);
  if (!hot.ok()) return hot.status();
  for (int e : *hot) {
    if (!in_t[static_cast<size_t>(e)] && cache_.score(next, e) > 0) {
      candidates.push_back({e, false});
    }
  }

  LayerResidencyStats& st = stats_[static_cast<size_t>(next)];
  int issued = 0;
  for (const auto& [c, from_t] : candidates) {
    if (issued >= options_.prefetch_budget) break;
    if (cache_.IsCached(next, c)) continue;
    if (cache_.size(next) >= capacity) {
      const int victim = LowestResident(next);
      if (victim < 0 || in_t[static_cast<size_t>(victim)]) break;
      if (!from_t && !(cache_.score(next, c) > cache_.score(next, victim))) {
        break;
      }
      absl::StatusOr<std::optional<int>> evicted = cache_.Evict(next);
      if (!evicted.ok()) return evicted.status();
      if (*evicted != std::optional<int>(victim)) {
        return absl::InternalError(
            "expert residency: the score cache evicted another expert");
      }
      plan->prefetch_evictions.push_back(victim);
      NoteEviction(next, victim);
    }
    absl::StatusOr<ExpertScoreCache::AdmitResult> r = cache_.Admit(next, c);
    if (!r.ok()) return r.status();
    if (!r->admitted || r->evicted.has_value()) {
      return absl::InternalError(
          "expert residency: a free slot did not admit a prefetch");
    }
    prefetched_[at(next, c)] = 1;
    plan->prefetch.push_back(c);
    ++st.prefetch_issued;
    ++issued;
  }
  return absl::OkStatus();
}

ExpertResidencyStats ExpertResidency::Stats() const {
  ExpertResidencyStats s;
  s.layers = stats_;
  for (int l = 0; l < options_.num_layers; ++l) {
    s.total.Add(stats_[static_cast<size_t>(l)]);
    s.resident += cache_.size(l);
  }
  s.capacity = static_cast<int64_t>(options_.num_layers) *
               static_cast<int64_t>(options_.capacity_per_layer);
  s.transition = table_.accuracy();
  return s;
}

std::string ExpertResidency::RenderPrometheus(absl::string_view prefix,
                                              absl::string_view labels) const {
  return ::tandem::RenderPrometheus(Stats(), prefix, labels);
}

}  // namespace tandem
