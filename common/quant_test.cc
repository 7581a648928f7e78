#include "common/quant.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

// Quantize then dequantize: the error of each element is bounded by the
// block's step size, which is what the block formats promise.
class QuantRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(QuantRoundTrip, ErrorWithinOneStep) {
  const DType t = GetParam();
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = 32 * 64;
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> q(DTypeBytes(t, n).value());
  QuantizeFromF32(t, x.data(), n, q.data());
  std::vector<float> y(n);
  ConvertToF32(t, q.data(), n, y.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    float lo = x[b * 32], hi = x[b * 32], amax = 0;
    for (int j = 0; j < 32; ++j) {
      lo = std::min(lo, x[b * 32 + j]);
      hi = std::max(hi, x[b * 32 + j]);
      amax = std::max(amax, std::fabs(x[b * 32 + j]));
    }
    // Allowed error: half a step of the rounding grid, plus what rounding the
    // f16 scale (and min) to 11 bits moves the grid by at its largest level.
    // Q4_0 maps the largest magnitude to -8, so the opposite extreme may clip
    // to +7: one whole step there.
    const float f16_rel = 1.0f / 2048;
    float bound = 0;
    if (t == DType::kQ8_0) bound = amax / 127 * (0.5f + 127 * f16_rel);
    if (t == DType::kQ4_0) bound = amax / 8 * (1.0f + 8 * f16_rel);
    if (t == DType::kQ4_1) bound = (hi - lo) / 15 * (0.5f + 15 * f16_rel) + std::fabs(lo) * f16_rel;
    if (t == DType::kF16) bound = amax / 2048;
    if (t == DType::kBF16) bound = amax / 256;
    for (int j = 0; j < 32; ++j) {
      ASSERT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound * 1.0001f + 1e-7f)
          << DTypeName(t) << " block " << b << " elem " << j << " seed " << seed;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip,
                         ::testing::Values(DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ4_1));

TEST(Quant, Q4_0KnownBlock) {
  BlockQ4_0 b{};
  b.d = F32ToF16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  ConvertToF32(DType::kQ4_0, &b, 32, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8));
  }
}

TEST(Quant, Q4_1KnownBlock) {
  BlockQ4_1 b{};
  b.d = F32ToF16(0.25f);
  b.m = F32ToF16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
  float y[32];
  ConvertToF32(DType::kQ4_1, &b, 32, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * j - 1.0f);
    EXPECT_EQ(y[j + 16], 0.25f * j - 1.0f);
  }
}

}  // namespace
}  // namespace tandem
