#include "cpu_worker/ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/status_macros.h"
#include "cpu_worker/ops/vec_math.h"

namespace tandem::ops {
namespace {

// Orders candidates by probability descending, then index ascending, so
// ties are resolved the same way on every run.
struct Before {
  bool operator()(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) const {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
};

__attribute__((target_clones("avx512f", "avx2", "default"))) float MaxScaled(const float* logits,
                                                                             int64_t n,
                                                                             float temp) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i] / temp);
  return mx;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void ScaledExp(const float* logits,
                                                                            int64_t n, float temp,
                                                                            float mx, float* w) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) w[i] = internal::ExpApprox(logits[i] / temp - mx);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) double Sum(const float* w, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[i]);
  return s;
}

// Mass and number of the tokens whose weight is at least `threshold`.
struct Tally {
  double mass = 0.0;
  int64_t count = 0;
};
__attribute__((target_clones("avx512f", "avx2", "default"))) Tally AtLeast(const float* w,
                                                                           int64_t n,
                                                                           float threshold) {
  double mass = 0.0;
  int64_t count = 0;
#pragma omp simd reduction(+ : mass, count)
  for (int64_t i = 0; i < n; ++i) {
    const bool in = w[i] >= threshold;
    mass += in ? static_cast<double>(w[i]) : 0.0;
    count += in ? 1 : 0;
  }
  return {mass, count};
}

}  // namespace

int32_t ArgMax(const float* logits, int64_t vocab) {
  TANDEM_CHECK(vocab > 0);
  // A NaN is skipped wherever it stands (the first logit included), so that
  // the pick does not depend on where a broken row's NaNs fall; the GPU's
  // argmax follows the same rule.
  int64_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (!std::isnan(v) && (best < 0 || v > logits[best])) best = i;
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

float LogProb(const float* logits, int64_t vocab, int32_t token) {
  TANDEM_CHECK(vocab > 0 && token >= 0 && token < vocab);
  double mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return static_cast<float>(static_cast<double>(logits[token]) - mx - std::log(sum));
}

int32_t Sampler::Sample(const float* logits, int64_t vocab) {
  TANDEM_CHECK(vocab > 0);
  if (params_.temperature <= 0.0f || params_.top_k == 1) return ArgMax(logits, vocab);

  // Temperature in f32, as transformers' logits warper applies it; each
  // token then gets its unnormalised probability exp(l / T - max).
  const float temp = params_.temperature;
  const float mx = MaxScaled(logits, vocab, temp);
  if (!std::isfinite(mx)) return ArgMax(logits, vocab);
  weights_.resize(static_cast<size_t>(vocab));
  ScaledExp(logits, vocab, temp, mx, weights_.data());

  scratch_.clear();
  const bool top_k = params_.top_k > 0 && params_.top_k < vocab;
  const bool top_p = params_.top_p < 1.0f;
  if (!top_k && !top_p) return Draw(weights_.data(), vocab);

  if (top_k) {
    // The k most probable, sorted (ties: lower index first); then top-p
    // over their renormalised probabilities, as transformers chains them.
    scratch_.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) {
      scratch_[static_cast<size_t>(i)] = {weights_[static_cast<size_t>(i)],
                                          static_cast<int32_t>(i)};
    }
    std::partial_sort(scratch_.begin(), scratch_.begin() + params_.top_k, scratch_.end(), Before{});
    scratch_.resize(static_cast<size_t>(params_.top_k));
    if (top_p) {
      double total = 0.0;
      for (const auto& c : scratch_) total += c.first;
      const double target = static_cast<double>(params_.top_p) * total;
      double cum = 0.0;
      size_t cut = scratch_.size();  // rounding never reaching the target keeps all
      for (size_t i = 0; i < scratch_.size(); ++i) {
        cum += scratch_[i].first;
        if (cum >= target) {
          cut = i + 1;
          break;
        }
      }
      scratch_.resize(cut);
    }
  } else {
    TopP();
  }

  // One draw among the candidates.
  double total = 0.0;
  for (const auto& c : scratch_) total += c.first;
  const double u = Uniform() * total;
  double cum = 0.0;
  for (const auto& c : scratch_) {
    cum += c.first;
    if (u < cum) return c.second;
  }
  return scratch_.back().second;
}

void Sampler::TopP() {
  // The nucleus is the smallest prefix of the descending order whose mass
  // reaches top_p of the total (at least one token). Rather than sorting
  // the vocabulary, vectorised passes narrow a band [lo, hi) of weights
  // that holds the boundary: tokens at or above hi are all in the nucleus
  // (in any order, the draw does not care), and only the band is sorted.
  const float* w = weights_.data();
  const int64_t vocab = static_cast<int64_t>(weights_.size());
  const double target = static_cast<double>(params_.top_p) * Sum(w, vocab);
  float hi = std::numeric_limits<float>::infinity();  // mass at or above: < target
  Tally at_hi;
  float lo = 1.0f;  // the most probable token has weight 1
  Tally at_lo = AtLeast(w, vocab, lo);
  while (at_lo.mass < target && lo > 0.0f) {
    hi = lo;
    at_hi = at_lo;
    lo *= 1.0f / 16.0f;  // reaches 0 eventually, where the mass is the total
    at_lo = AtLeast(w, vocab, lo);
  }
  while (at_lo.count - at_hi.count > 64 && std::isfinite(hi)) {
    const float mid = lo + (hi - lo) * 0.5f;
    if (mid <= lo || mid >= hi) break;  // equal weights cannot be split
    const Tally at_mid = AtLeast(w, vocab, mid);
    if (at_mid.mass >= target) {
      lo = mid;
      at_lo = at_mid;
    } else {
      hi = mid;
      at_hi = at_mid;
    }
  }
  double cum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (w[i] >= hi) {
      scratch_.emplace_back(w[i], static_cast<int32_t>(i));
      cum += w[i];
    }
  }
  const size_t band_begin = scratch_.size();
  for (int64_t i = 0; i < vocab; ++i) {
    if (w[i] >= lo && w[i] < hi) scratch_.emplace_back(w[i], static_cast<int32_t>(i));
  }
  std::sort(scratch_.begin() + static_cast<std::ptrdiff_t>(band_begin), scratch_.end(), Before{});
  for (size_t i = band_begin; i < scratch_.size(); ++i) {
    cum += scratch_[i].first;
    if (cum >= target) {
      scratch_.resize(i + 1);
      return;
    }
  }
  // Rounding kept the sum just short of the target: the whole band stays.
}

double Sampler::Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Draw(const float* weights, int64_t n) {
  const double u = Uniform() * Sum(weights, n);
  double cum = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (weights[i] <= 0.0f) continue;
    last = i;
    cum += weights[i];
    if (u < cum) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);
}

uint64_t TokenSeed(uint64_t request_seed, int64_t index) {
  uint64_t z = request_seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace tandem::ops
