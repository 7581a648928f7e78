#include "cpu_worker/ops/elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "cpu_worker/ops/vec_math.h"
#include "gtest/gtest.h"

namespace tandem {

void PrintTo(DType t, std::ostream* os) { *os << DTypeName(t); }

namespace ops {
namespace {

std::vector<float> RandomVec(std::mt19937& rng, int64_t n, float mean = 0.0f, float stddev = 1.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(ExpApproxTest, RelativeErrorBelow3e7) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (float x = -87.0f; x <= 88.7f; x += 0.000731f) {
    const double want = std::exp(static_cast<double>(x));
    const double err = std::fabs(internal::ExpApprox(x) - want) / want;
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  EXPECT_LT(worst, 3e-7) << "at x = " << worst_x;
  std::printf("ExpApprox worst relative error %g at x = %g\n", worst, worst_x);
  EXPECT_EQ(internal::ExpApprox(0.0f), 1.0f);
  EXPECT_EQ(internal::ExpApprox(-1000.0f), 0.0f);
  EXPECT_EQ(internal::ExpApprox(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isinf(internal::ExpApprox(1000.0f)));
  EXPECT_TRUE(std::isinf(internal::ExpApprox(88.73f)));
  EXPECT_NEAR(internal::ExpApprox(88.7f), std::exp(double{88.7f}), 1e-6 * std::exp(88.7));
  // Gradual underflow: subnormal results keep their (absolute) accuracy.
  EXPECT_NEAR(internal::ExpApprox(-100.0f), std::exp(-100.0), 1.5e-45);
  EXPECT_NEAR(internal::ExpApprox(-87.0f), std::exp(-87.0), 1e-6 * std::exp(-87.0));
  EXPECT_TRUE(std::isnan(internal::ExpApprox(std::numeric_limits<float>::quiet_NaN())));
}

TEST(RmsNormTest, MatchesReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (int64_t rows : {1, 3, 17, 64}) {
    for (int64_t dim : {1, 7, 64, 130, 4096}) {
      SCOPED_TRACE(absl::StrCat("rows ", rows, " dim ", dim));
      const float eps = 1e-6f;
      auto x = RandomVec(rng, rows * dim, 0.1f, 3.0f);
      auto w = RandomVec(rng, dim, 1.0f, 0.2f);
      std::vector<float> out(x.size());
      RmsNorm(x.data(), rows, dim, w.data(), eps, out.data());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < dim; ++i) ss += double{x[r * dim + i]} * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
        for (int64_t i = 0; i < dim; ++i) {
          const double ref = double{w[i]} * x[r * dim + i] * inv;
          ASSERT_NEAR(out[r * dim + i], ref, 1e-6 * std::fabs(ref) + 1e-30)
              << "row " << r << " element " << i;
        }
      }
      // In place gives the same bits.
      std::vector<float> in_place = x;
      RmsNorm(in_place.data(), rows, dim, w.data(), eps, in_place.data());
      EXPECT_EQ(in_place, out);
    }
  }
}

double ReferenceSilu(double g) { return g / (1.0 + std::exp(-g)); }

TEST(SwiGluTest, MatchesReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (int64_t n : {1, 7, 1000, 70001}) {
    SCOPED_TRACE(absl::StrCat("n ", n));
    auto g = RandomVec(rng, n, 0.0f, 4.0f);
    auto u = RandomVec(rng, n);
    if (n > 8) {
      // Saturated and extreme gates.
      g[0] = 0.0f;
      g[1] = 100.0f;
      g[2] = -100.0f;
      g[3] = 88.5f;
      g[4] = -88.5f;
      g[5] = 20.0f;
      g[6] = -20.0f;
    }
    std::vector<float> out(static_cast<size_t>(n));
    SwiGlu(g.data(), u.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ref = ReferenceSilu(g[i]) * u[i];
      ASSERT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-35) << "gate " << g[i] << " up " << u[i];
    }
    std::vector<float> in_place = g;
    SwiGlu(in_place.data(), u.data(), n, in_place.data());
    EXPECT_EQ(in_place, out);
  }
}

TEST(AddScaledTest, MatchesReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    auto x = RandomVec(rng, n);
    auto y = RandomVec(rng, n);
    const float scale = 0.37f;
    std::vector<float> out = y;
    AddScaled(x.data(), scale, n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ref = double{y[i]} + double{x[i]} * scale;
      ASSERT_NEAR(out[i], ref, 1e-6 * (std::fabs(y[i]) + std::fabs(x[i] * scale)) + 1e-35)
          << "n " << n << " i " << i;
    }
  }
}

class EmbeddingLookupTest : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingLookupTest, RowsMatchFullConversion) {
  const DType t = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const int64_t vocab = 50, dim = 96;
  auto values = RandomVec(rng, vocab * dim);
  std::vector<uint8_t> stored(static_cast<size_t>(DTypeBytes(t, vocab * dim).value()));
  switch (t) {
    case DType::kF32:
      std::memcpy(stored.data(), values.data(), stored.size());
      break;
    case DType::kF16:
    case DType::kBF16: {
      auto* h = reinterpret_cast<uint16_t*>(stored.data());
      for (size_t i = 0; i < values.size(); ++i) {
        h[i] = t == DType::kF16 ? F32ToF16(values[i]) : F32ToBf16(values[i]);
      }
      break;
    }
    default:
      QuantizeFromF32(t, values.data(), vocab * dim, stored.data());
  }
  std::vector<float> all(values.size());
  ConvertToF32(t, stored.data(), vocab * dim, all.data());

  TensorView table;
  table.name = "embed";
  table.dtype = t;
  table.shape = {vocab, dim};
  table.data = stored.data();
  table.nbytes = static_cast<int64_t>(stored.size());
  std::uniform_int_distribution<int32_t> id_dist(0, vocab - 1);
  std::vector<int32_t> ids = {0, static_cast<int32_t>(vocab - 1), 3, 3};
  for (int i = 0; i < 13; ++i) ids.push_back(id_dist(rng));
  std::vector<float> out(ids.size() * dim);
  EmbeddingLookup(table, ids.data(), static_cast<int64_t>(ids.size()), out.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(out[i * dim + d], all[ids[i] * dim + d]) << "token " << i << " dim " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(StoredTypes, EmbeddingLookupTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ4_1),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(EmbeddingLookupDeathTest, IdOutOfRangeIsAnInvariant) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> data(4 * 8, 1.0f);
  TensorView table;
  table.dtype = DType::kF32;
  table.shape = {4, 8};
  table.data = data.data();
  table.nbytes = 4 * 8 * 4;
  std::vector<float> out(8);
  const int32_t bad = 4;
  EXPECT_DEATH(EmbeddingLookup(table, &bad, 1, out.data()), "invariant violated");
  const int32_t negative = -1;
  EXPECT_DEATH(EmbeddingLookup(table, &negative, 1, out.data()), "invariant violated");
}

}  // namespace
}  // namespace ops
}  // namespace tandem
