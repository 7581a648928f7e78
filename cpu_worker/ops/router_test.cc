#include "cpu_worker/ops/router.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

TEST(RouteTopKTest, MatchesReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (int64_t n : {1, 3, 17, 64}) {
    for (int64_t experts : {8, 60, 64, 128}) {
      for (int64_t k : {1, 2, 4, 8}) {
        for (bool renorm : {false, true}) {
          SCOPED_TRACE(absl::StrCat("n ", n, " experts ", experts, " k ", k, " renorm ", renorm));
          std::vector<float> logits(static_cast<size_t>(n * experts));
          for (auto& x : logits) x = dist(rng);
          std::vector<int32_t> ids(static_cast<size_t>(n * k), -1);
          std::vector<float> w(static_cast<size_t>(n * k));
          RouteTopK(logits.data(), n, experts, k, renorm, ids.data(), w.data());
          for (int64_t t = 0; t < n; ++t) {
            // Reference: softmax in double, order by (prob desc, index asc).
            const float* l = logits.data() + t * experts;
            const double mx = *std::max_element(l, l + experts);
            std::vector<double> p(static_cast<size_t>(experts));
            double sum = 0.0;
            for (int64_t e = 0; e < experts; ++e) sum += p[e] = std::exp(l[e] - mx);
            for (auto& x : p) x /= sum;
            std::vector<int32_t> order(static_cast<size_t>(experts));
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(),
                             [&](int32_t a, int32_t b) { return p[a] > p[b]; });
            double kept = 0.0;
            for (int64_t j = 0; j < k; ++j) kept += p[order[j]];
            // The kernel's f32 error, relative: its left-to-right sum of
            // `experts` exponentials is within (experts - 1) units of
            // rounding (u = 2^-24) of the exact sum, each exp and the
            // divisions within a unit or two, and the renormalisation adds
            // k more. A fixed 1e-6 failed for about one seed in 170 at 128
            // experts (1.01e-6 seen).
            const double rel = static_cast<double>(experts + k + 4) * std::ldexp(1.0, -24);
            bool near_tie = false;
            for (int64_t j = 0; j < k && j + 1 < experts; ++j) {
              near_tie |= p[order[j]] - p[order[j + 1]] < 2 * rel * p[order[j]];
            }
            for (int64_t j = 0; j < k; ++j) {
              const int32_t id = ids[t * k + j];
              ASSERT_TRUE(id >= 0 && id < experts);
              if (!near_tie) {
                EXPECT_EQ(id, order[j]) << "token " << t << " rank " << j;
              }
              // The reported weight is this expert's probability either way.
              const double want = renorm ? p[id] / kept : p[id];
              EXPECT_NEAR(w[t * k + j], want, rel * want + 1e-9) << "token " << t;
              if (j > 0) {
                EXPECT_GE(w[t * k + j - 1], w[t * k + j]);
              }
            }
            if (renorm) {
              double s = 0.0;
              for (int64_t j = 0; j < k; ++j) s += w[t * k + j];
              EXPECT_NEAR(s, 1.0, 1e-6);
            }
          }
        }
      }
    }
  }
}

TEST(RouteTopKTest, TiesGoToTheLowerIndex) {
  const float logits[] = {1.0f, 3.0f, 3.0f, 0.0f};
  int32_t ids[2];
  float w[2];
  RouteTopK(logits, 1, 4, 2, false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  const double denom = std::exp(1.0) + 2 * std::exp(3.0) + 1.0;
  EXPECT_NEAR(w[0], std::exp(3.0) / denom, 1e-7);
  EXPECT_EQ(w[0], w[1]);
  RouteTopK(logits, 1, 4, 2, true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
}

TEST(RouteTopKTest, AllEqualLogits) {
  const std::vector<float> logits(8, 0.25f);
  int32_t ids[3];
  float w[3];
  RouteTopK(logits.data(), 1, 8, 3, false, ids, w);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(ids[j], j);
    EXPECT_FLOAT_EQ(w[j], 0.125f);
  }
  RouteTopK(logits.data(), 1, 8, 3, true, ids, w);
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(w[j], 1.0f / 3.0f);
}

TEST(RouteTopKTest, LargeLogitsAreStable) {
  // Two tokens: softmax must subtract the max (exp(1000) overflows f32).
  const float logits[] = {1000.0f, 999.0f, -5.0f, 0.0f,  //
                          -3.0f,   -2.0f,  -1.0f, -4.0f};
  int32_t ids[4];
  float w[4];
  RouteTopK(logits, 2, 4, 2, false, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(w[1], std::exp(-1.0) / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(ids[2], 2);
  EXPECT_EQ(ids[3], 1);
  EXPECT_GT(w[2], w[3]);
}

}  // namespace
}  // namespace tandem::ops
