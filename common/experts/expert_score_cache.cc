#include "common/experts/expert_score_cache.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace tandem::experts {

ExpertScoreCache::ExpertScoreCache(int layers, int experts, int capacity,
                                   double alpha)
    : num_layers_(layers),
      num_experts_(experts),
      capacity_(capacity),
      alpha_(alpha),
      scores_(static_cast<size_t>(layers) * static_cast<size_t>(experts), 0.0),
      cached_(scores_.size(), 0),
      sizes_(static_cast<size_t>(layers), 0) {}

absl::StatusOr<ExpertScoreCache> ExpertScoreCache::Create(
    int num_layers, int num_experts, int capacity_per_layer, double alpha) {
  if (num_layers < 1 || num_experts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert cache: ", num_layers, " layers and ", num_experts,
                     " experts; both must be >= 1"));
  }
  if (capacity_per_layer < 0 || capacity_per_layer > num_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert cache: capacity ", capacity_per_layer,
                     " outside [0, ", num_experts, "]"));
  }
  if (!(alpha > 0 && alpha <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert cache: alpha ", alpha, " outside (0, 1]"));
  }
  return ExpertScoreCache(num_layers, num_experts, capacity_per_layer, alpha);
}

absl::Status ExpertScoreCache::CheckLayer(int layer) const {
  if (layer < 0 || layer >= num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert cache: layer ", layer, " outside [0, ", num_layers_, ")"));
  }
  return absl::OkStatus();
}

absl::Status ExpertScoreCache::Update(int layer,
                                      absl::Span<const double> routing_scores) {
  if (absl::Status s = CheckLayer(layer); !s.ok()) return s;
  if (routing_scores.size() != static_cast<size_t>(num_experts_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert cache: ", routing_scores.size(),
                     " routing scores for ", num_experts_, " experts"));
  }
  for (double s : routing_scores) {
    if (!std::isfinite(s) || s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert cache: routing score ", s));
    }
  }
  for (int e = 0; e < num_experts_; ++e) {
    double& s = scores_[at(layer, e)];
    s = alpha_ * routing_scores[e] + (1 - alpha_) * s;
  }
  return absl::OkStatus();
}

double ExpertScoreCache::score(int layer, int expert) const {
  if (layer < 0 || layer >= num_layers_ || expert < 0 ||
      expert >= num_experts_) {
    return 0;
  }
  return scores_[at(layer, expert)];
}

bool ExpertScoreCache::IsCached(int layer, int expert) const {
  if (layer < 0 || layer >= num_layers_ || expert < 0 ||
      expert >= num_experts_) {
    return false;
  }
  return cached_[at(layer, expert)] != 0;
}

int ExpertScoreCache::size(int layer) const {
  return layer >= 0 && layer < num_layers_ ? sizes_[layer] : 0;
}

std::vector<int> ExpertScoreCache::Cached(int layer) const {
  std::vector<int> out;
  for (int e = 0; e < num_experts_; ++e) {
    if (IsCached(layer, e)) out.push_back(e);
  }
  return out;
}

int ExpertScoreCache::LowestResident(int layer) const {
  int lowest = -1;
  for (int e = 0; e < num_experts_; ++e) {
    if (!cached_[at(layer, e)]) continue;
    if (lowest < 0 || scores_[at(layer, e)] < scores_[at(layer, lowest)]) {
      lowest = e;
    }
  }
  return lowest;
}

absl::StatusOr<ExpertScoreCache::AdmitResult> ExpertScoreCache::Admit(
    int layer, int expert) {
  if (absl::Status s = CheckLayer(layer); !s.ok()) return s;
  if (expert < 0 || expert >= num_experts_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert cache: expert ", expert, " outside [0, ", num_experts_, ")"));
  }
  AdmitResult r;
  if (cached_[at(layer, expert)]) {
    r.admitted = true;
    return r;
  }
  if (capacity_ == 0) return r;
  if (sizes_[layer] >= capacity_) {
    const int victim = LowestResident(layer);
    if (!(scores_[at(layer, expert)] > scores_[at(layer, victim)])) return r;
    cached_[at(layer, victim)] = 0;
    --sizes_[layer];
    r.evicted = victim;
  }
  cached_[at(layer, expert)] = 1;
  ++sizes_[layer];
  r.admitted = true;
  return r;
}

absl::StatusOr<std::optional<int>> ExpertScoreCache::Evict(int layer) {
  if (absl::Status s = CheckLayer(layer); !s.ok()) return s;
  const int victim = LowestResident(layer);
  if (victim < 0) return std::optional<int>();
  cached_[at(layer, victim)] = 0;
  --sizes_[layer];
  return std::optional<int>(victim);
}

absl::StatusOr<std::vector<int>> ExpertScoreCache::PrefetchCandidates(
    int layer, int count) const {
  if (absl::Status s = CheckLayer(layer); !s.ok()) return s;
  if (count < 0) {
    return absl::InvalidArgumentError("expert cache: negative prefetch count");
  }
  std::vector<int> out;
  for (int e = 0; e < num_experts_; ++e) {
    if (!cached_[at(layer, e)]) out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [&](int a, int b) {
    return scores_[at(layer, a)] > scores_[at(layer, b)];
  });
  if (out.size() > static_cast<size_t>(count)) {
    out.resize(static_cast<size_t>(count));
  }
  return out;
}

}  // namespace tandem::experts
