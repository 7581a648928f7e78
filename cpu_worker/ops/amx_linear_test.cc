// The AMX decode-batch kernel against the plain reference on fresh random
// inputs, and its batch invariance. Skips itself where AMX is not usable.
#include "cpu_worker/ops/amx_linear.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/linear.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

struct Case {
  std::vector<float> x, xr, w, bias;  // xr: x rounded to bf16
  std::vector<uint16_t> wb;
};

Case MakeCase(std::mt19937& rng, int64_t m, int64_t n, int64_t k) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Case c;
  c.x.resize(static_cast<size_t>(m * k));
  c.xr.resize(c.x.size());
  for (size_t i = 0; i < c.x.size(); ++i) {
    c.x[i] = dist(rng);
    c.xr[i] = Bf16ToF32(F32ToBf16(c.x[i]));
  }
  c.wb.resize(static_cast<size_t>(n * k));
  c.w.resize(c.wb.size());
  for (size_t i = 0; i < c.wb.size(); ++i) {
    c.wb[i] = F32ToBf16(dist(rng) * 0.05f);
    c.w[i] = Bf16ToF32(c.wb[i]);
  }
  c.bias.resize(static_cast<size_t>(n));
  for (auto& b : c.bias) b = dist(rng);
  return c;
}

// AMX products of bf16 values are exact and accumulate in f32: against a
// double reference on the rounded inputs, an element may be off by a few
// f32 roundings of the running sum, which is bounded by k ulps of
// sum |x w|.
void ExpectMatchesReference(const Case& c, int64_t m, int64_t n, int64_t k, const float* bias,
                            const std::vector<float>& y, const std::string& what) {
  std::vector<float> ref(static_cast<size_t>(m * n));
  ReferenceLinear(c.xr.data(), m, c.w.data(), n, k, bias, ref.data());
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    for (int64_t j = 0; j < n && failures < 5; ++j) {
      double mag = bias != nullptr ? std::fabs(bias[j]) : 0.0;
      for (int64_t l = 0; l < k; ++l) mag += std::fabs(c.xr[i * k + l] * c.w[j * k + l]);
      const double tol = 1e-6 + 4.0 * static_cast<double>(k) / 32 * 1.2e-7 * mag;
      const double got = y[static_cast<size_t>(i * n + j)];
      const double want = ref[static_cast<size_t>(i * n + j)];
      if (!(std::fabs(got - want) <= tol)) {
        ADD_FAILURE() << what << ": y[" << i << "][" << j << "] = " << got << ", reference "
                      << want << " (tolerance " << tol << ")";
        ++failures;
      }
    }
  }
}

class AmxLinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!internal::AmxUsable()) {
      GTEST_SKIP() << "AMX is not usable here (CPU features: "
                   << CpuFeaturesString(HostCpuFeatures())
                   << "); the kernel is not used on this machine";
    }
  }
};

TEST_F(AmxLinearTest, MatchesReferenceOnRandomShapes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  // n: whole items, a partial second tile, a partial first tile, below one
  // tile; k: one block and several; m: every column-tile case.
  const int64_t ns[] = {64, 48, 40, 7, 100};
  const int64_t ks[] = {32, 96, 544};
  const int64_t ms[] = {1, 5, 16, 17, 31, 32};
  for (int64_t n : ns) {
    for (int64_t k : ks) {
      for (int64_t m : ms) {
        const Case c = MakeCase(rng, m, n, k);
        for (bool with_bias : {false, true}) {
          const float* bias = with_bias ? c.bias.data() : nullptr;
          std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
          internal::AmxLinear(c.x.data(), m, c.wb.data(), n, k, bias, y.data());
          ExpectMatchesReference(c, m, n, k, bias, y,
                                 absl::StrCat("m=", m, " n=", n, " k=", k, " bias=", with_bias));
        }
      }
    }
  }
}

TEST_F(AmxLinearTest, LargeShapeOnAllThreads) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const int64_t m = 24, n = 1000, k = 2048;
  const Case c = MakeCase(rng, m, n, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  internal::AmxLinear(c.x.data(), m, c.wb.data(), n, k, c.bias.data(), y.data());
  ExpectMatchesReference(c, m, n, k, c.bias.data(), y, "m=24 n=1000 k=2048");
}

// A row of x gives the same bits alone and at every position of every
// batch size up to kAmxMaxRows.
TEST_F(AmxLinearTest, RowResultDoesNotDependOnTheBatch) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const int64_t n = 80, k = 320, kMax = internal::kAmxMaxRows;
  const Case c = MakeCase(rng, kMax, n, k);
  std::vector<std::vector<float>> alone(static_cast<size_t>(kMax));
  for (int64_t i = 0; i < kMax; ++i) {
    alone[static_cast<size_t>(i)].resize(static_cast<size_t>(n));
    internal::AmxLinear(c.x.data() + i * k, 1, c.wb.data(), n, k, c.bias.data(),
                        alone[static_cast<size_t>(i)].data());
  }
  for (int64_t m = 2; m <= kMax; ++m) {
    // Rows [kMax - m, kMax): every row of x lands at other positions.
    const int64_t first = kMax - m;
    std::vector<float> y(static_cast<size_t>(m * n));
    internal::AmxLinear(c.x.data() + first * k, m, c.wb.data(), n, k, c.bias.data(), y.data());
    for (int64_t i = 0; i < m; ++i) {
      const auto& want = alone[static_cast<size_t>(first + i)];
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(y[static_cast<size_t>(i * n + j)], want[static_cast<size_t>(j)])
            << "row " << first + i << " at position " << i << " of a batch of " << m
            << ", output " << j;
      }
    }
  }
}

TEST(AmxLinearFitsTest, ShapesTheKernelTakes) {
  EXPECT_TRUE(internal::AmxLinearFits(1, 32));
  EXPECT_TRUE(internal::AmxLinearFits(internal::kAmxMaxRows, 4096));
  EXPECT_FALSE(internal::AmxLinearFits(0, 32));
  EXPECT_FALSE(internal::AmxLinearFits(internal::kAmxMaxRows + 1, 32));
  EXPECT_FALSE(internal::AmxLinearFits(4, 48));  // k not a whole number of blocks
}

// The int8 probe follows the CPU's flags: where AMX-INT8 is listed beside
// a usable AMX-BF16 its tile multiply must have run (a fault or a wrong
// sum is a failure here, not a silent fallback); elsewhere it is off.
TEST(AmxInt8UsableTest, FollowsTheCpuAndTheBf16Probe) {
  const CpuFeatures& f = HostCpuFeatures();
  if (!internal::AmxUsable() || !f.amx_int8) {
    EXPECT_FALSE(internal::AmxInt8Usable());
    return;
  }
  EXPECT_TRUE(internal::AmxInt8Usable()) << "AMX-INT8 listed, its probe failed";
}

}  // namespace
}  // namespace tandem::ops
