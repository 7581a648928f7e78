#include "cpu_worker/ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

std::vector<float> RandomLogits(std::mt19937& rng, int64_t vocab, float stddev = 3.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(ArgMaxTest, LowestIndexAmongTies) {
  const float a[] = {1.0f, 5.0f, 2.0f, 5.0f};
  EXPECT_EQ(ArgMax(a, 4), 1);
  const float b[] = {-std::numeric_limits<float>::infinity(), -3.0f};
  EXPECT_EQ(ArgMax(b, 2), 1);
  const float c[] = {7.0f};
  EXPECT_EQ(ArgMax(c, 1), 0);
}

TEST(ArgMaxTest, NaNsAreSkippedWhereverTheyStand) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float first[] = {nan, 1.0f, 3.0f, 2.0f};
  EXPECT_EQ(ArgMax(first, 4), 2);
  const float middle[] = {1.0f, nan, 3.0f, nan};
  EXPECT_EQ(ArgMax(middle, 4), 2);
  const float then_inf[] = {nan, -inf, -inf};
  EXPECT_EQ(ArgMax(then_inf, 3), 1);
  const float all_nan[] = {nan, nan};
  EXPECT_EQ(ArgMax(all_nan, 2), 0);
}

TEST(SamplerTest, GreedyIsArgMax) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (int64_t vocab : {1, 2, 17, 1000, 32000}) {
    auto logits = RandomLogits(rng, vocab);
    Sampler greedy(SamplingParams{});  // temperature 0
    const int32_t want =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(ArgMax(logits.data(), vocab), want);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(greedy.Sample(logits.data(), vocab), want);
  }
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (float temperature : {0.1f, 1.0f, 5.0f, 100.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 1;
    p.seed = seed;
    Sampler s(p);
    for (int i = 0; i < 20; ++i) {
      auto logits = RandomLogits(rng, 500);
      EXPECT_EQ(s.Sample(logits.data(), 500), ArgMax(logits.data(), 500));
    }
  }
}

TEST(SamplerTest, SameSeedSameTokens) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 50; ++i) steps.push_back(RandomLogits(rng, 300, 1.0f));
  for (SamplingParams p : {SamplingParams{1.0f, 0, 1.0f, 0}, SamplingParams{0.7f, 40, 0.9f, 0},
                           SamplingParams{1.3f, 0, 0.5f, 0}}) {
    p.seed = seed;
    Sampler a(p), b(p);
    std::vector<int32_t> ta, tb;
    for (const auto& l : steps) {
      ta.push_back(a.Sample(l.data(), 300));
      tb.push_back(b.Sample(l.data(), 300));
    }
    EXPECT_EQ(ta, tb);
    // A different seed gives a different sequence (50 draws over a flat-ish
    // distribution colliding is practically impossible).
    p.seed = seed + 1;
    Sampler c(p);
    std::vector<int32_t> tc;
    for (const auto& l : steps) tc.push_back(c.Sample(l.data(), 300));
    EXPECT_NE(ta, tc);
  }
}

// Pearson's chi-square against expected counts. The sampler draws from the
// test's fresh seed, so each check is a real hypothesis test that a correct
// sampler fails with the bound's tail probability: 21.1 (the 99.99th
// percentile at 3 degrees of freedom) failed a run about once in 1,900 over
// the file's eight checks. At kChiSquareBound the tail is 5.7e-10 at 3
// degrees of freedom (1e-10 at 2, 1.2e-11 at 1), while a wrong distribution
// (a temperature off, a token missing from the nucleus) gives thousands at
// these draw counts.
constexpr double kChiSquareBound = 46.0;
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int draws) {
  double chi = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = p[i] * draws;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(SamplerTest, TemperatureDistribution) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 1.5f};
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    SCOPED_TRACE(absl::StrCat("temperature ", temperature));
    std::vector<double> p(4);
    double sum = 0.0;
    for (int i = 0; i < 4; ++i) sum += p[i] = std::exp(logits[i] / temperature);
    for (auto& x : p) x /= sum;
    SamplingParams sp;
    sp.temperature = temperature;
    sp.seed = seed;
    Sampler s(sp);
    const int draws = 20000;
    std::vector<int> counts(4, 0);
    for (int i = 0; i < draws; ++i) ++counts[s.Sample(logits.data(), 4)];
    EXPECT_LT(ChiSquare(counts, p, draws), kChiSquareBound)
        << counts[0] << " " << counts[1] << " " << counts[2] << " " << counts[3];
  }
}

TEST(SamplerTest, TopKNeverEmitsExcludedTokensAndKeepsTheirShares) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  // Token 5 ties with token 2 at the boundary; the lower index is kept.
  const std::vector<float> logits = {0.1f, 3.0f, 1.0f, 2.5f, 2.0f, 1.0f, -1.0f, 0.0f};
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 4;
  sp.seed = seed;
  Sampler s(sp);
  const std::vector<int32_t> kept = {1, 3, 4, 2};
  std::vector<double> p;
  double sum = 0.0;
  for (int32_t id : kept) sum += std::exp(double{logits[id]});
  for (int32_t id : kept) p.push_back(std::exp(double{logits[id]}) / sum);
  const int draws = 20000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < draws; ++i) {
    const int32_t t = s.Sample(logits.data(), 8);
    auto it = std::find(kept.begin(), kept.end(), t);
    ASSERT_NE(it, kept.end()) << "emitted excluded token " << t;
    ++counts[static_cast<size_t>(it - kept.begin())];
  }
  EXPECT_LT(ChiSquare(counts, p, draws), kChiSquareBound);

  // Random logits over a large vocabulary: only the k best ever appear.
  auto big = RandomLogits(rng, 5000);
  std::vector<int32_t> order(5000);
  for (int32_t i = 0; i < 5000; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return big[a] > big[b] || (big[a] == big[b] && a < b); });
  sp.top_k = 10;
  sp.temperature = 3.0f;
  Sampler s2(sp);
  const std::set<int32_t> allowed(order.begin(), order.begin() + 10);
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = s2.Sample(big.data(), 5000);
    ASSERT_TRUE(allowed.count(t)) << "emitted token " << t << " outside the top 10";
  }
}

TEST(SamplerTest, TopPNeverEmitsExcludedTokensAndKeepsTheirShares) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  // Probabilities 0.5, 0.25, 0.15, 0.1 (by construction of the logits).
  const std::vector<double> probs = {0.25, 0.5, 0.1, 0.15};
  std::vector<float> logits;
  for (double q : probs) logits.push_back(static_cast<float>(std::log(q)));
  struct Case {
    float top_p;
    std::vector<int32_t> kept;  // in descending probability order
  };
  for (const Case& c : {Case{0.7f, {1, 0}}, Case{0.8f, {1, 0, 3}}, Case{0.3f, {1}}, Case{0.0f, {1}},
                        Case{0.95f, {1, 0, 3, 2}}}) {
    SCOPED_TRACE(absl::StrCat("top_p ", c.top_p));
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_p = c.top_p;
    sp.seed = seed;
    Sampler s(sp);
    double sum = 0.0;
    for (int32_t id : c.kept) sum += probs[id];
    std::vector<double> p;
    for (int32_t id : c.kept) p.push_back(probs[id] / sum);
    const int draws = 20000;
    std::vector<int> counts(c.kept.size(), 0);
    for (int i = 0; i < draws; ++i) {
      const int32_t t = s.Sample(logits.data(), 4);
      auto it = std::find(c.kept.begin(), c.kept.end(), t);
      ASSERT_NE(it, c.kept.end()) << "emitted excluded token " << t;
      ++counts[static_cast<size_t>(it - c.kept.begin())];
    }
    if (c.kept.size() > 1) {
      // Degrees of freedom <= 3: kChiSquareBound's tail is at most 5.7e-10.
      EXPECT_LT(ChiSquare(counts, p, draws), kChiSquareBound);
    }
  }
}

TEST(SamplerTest, TopPWithTiesKeepsLowerIndices) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  // 1000 equal logits: the nucleus for 0.5 is the 500 lowest indices.
  const std::vector<float> logits(1000, 0.3f);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.5f;
  sp.seed = seed;
  Sampler s(sp);
  std::set<int32_t> seen;
  for (int i = 0; i < 4000; ++i) {
    const int32_t t = s.Sample(logits.data(), 1000);
    ASSERT_LT(t, 500);
    ASSERT_GE(t, 0);
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 450u);  // uniform over 500: all but a few appear
}

TEST(SamplerTest, TopKThenTopP) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  // Probabilities 0.25, 0.5, 0.1, 0.15. Top-3 keeps {1, 0, 3}, renormalised
  // to 0.556, 0.278, 0.167; top-p 0.8 then keeps {1, 0}.
  std::vector<float> logits;
  for (double q : {0.25, 0.5, 0.1, 0.15}) logits.push_back(static_cast<float>(std::log(q)));
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 3;
  sp.top_p = 0.8f;
  sp.seed = seed;
  Sampler s(sp);
  std::vector<int> counts(2, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    const int32_t t = s.Sample(logits.data(), 4);
    ASSERT_TRUE(t == 0 || t == 1) << "emitted excluded token " << t;
    ++counts[t == 1 ? 0 : 1];
  }
  EXPECT_LT(ChiSquare(counts, {2.0 / 3.0, 1.0 / 3.0}, draws), kChiSquareBound);
}

TEST(SamplerTest, TopPOverLargeVocabulary) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const int64_t vocab = 32000;
  auto logits = RandomLogits(rng, vocab, 2.0f);
  // The nucleus by a plain full sort.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double mx = logits[order[0]];
  double total = 0.0;
  for (float l : logits) total += std::exp(l - mx);
  const float top_p = 0.9f;
  std::set<int32_t> nucleus;
  double cum = 0.0;
  for (int32_t id : order) {
    nucleus.insert(id);
    cum += std::exp(logits[id] - mx);
    if (cum >= top_p * total) break;
  }
  ASSERT_GT(nucleus.size(), 64u) << "the nucleus should be more than a handful of tokens";
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_p = top_p;
  sp.top_k = 0;
  sp.seed = seed;
  Sampler s(sp);
  std::set<int32_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const int32_t t = s.Sample(logits.data(), vocab);
    ASSERT_TRUE(nucleus.count(t)) << "token " << t << " is outside the nucleus";
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 10u);
}

TEST(LogProbTest, MatchesDoubleLogSoftmax) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (int64_t vocab : {1, 5, 1000, 128256}) {
    auto logits = RandomLogits(rng, vocab, 5.0f);
    logits[0] = 80.0f;  // large values must not overflow
    double mx = -1e300, sum = 0.0;
    for (float l : logits) mx = std::max(mx, double{l});
    for (float l : logits) sum += std::exp(l - mx);
    for (int32_t t : {0, static_cast<int32_t>(vocab - 1), static_cast<int32_t>(vocab / 2)}) {
      const double want = logits[t] - mx - std::log(sum);
      EXPECT_NEAR(LogProb(logits.data(), vocab, t), want, 1e-6 * (1.0 + std::fabs(want)));
    }
  }
  const float two[] = {0.0f, 0.0f};
  EXPECT_NEAR(LogProb(two, 2, 1), std::log(0.5), 1e-7);
}

TEST(TokenSeed, DependsOnSeedAndIndexOnly) {
  EXPECT_EQ(TokenSeed(7, 3), TokenSeed(7, 3));
  std::set<uint64_t> seen;
  for (uint64_t seed : {0ull, 1ull, 7ull}) {
    for (int64_t i = 0; i < 100; ++i) seen.insert(TokenSeed(seed, i));
  }
  EXPECT_EQ(seen.size(), 300u);
}

TEST(TokenSeed, ReseedingMakesADrawAPureFunction) {
  std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler a(p), b(p);
  for (int i = 0; i < 5; ++i) a.Sample(logits.data(), 8);  // advance a's stream
  a.Reseed(TokenSeed(3, 9));
  b.Reseed(TokenSeed(3, 9));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.Sample(logits.data(), 8), b.Sample(logits.data(), 8));
}

}  // namespace
}  // namespace tandem::ops
