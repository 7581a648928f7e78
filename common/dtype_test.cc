#include "common/dtype.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(DType, Sizes) {
  EXPECT_EQ(DTypeBytes(DType::kF32, 10).value(), 40);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 3).value(), 6);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 64).value(), 68);
  EXPECT_EQ(DTypeBytes(DType::kQ4_0, 32).value(), 18);
  EXPECT_EQ(DTypeBytes(DType::kQ4_1, 96).value(), 60);
  EXPECT_FALSE(DTypeBytes(DType::kQ4_0, 33).ok());
  EXPECT_FALSE(DTypeBytes(DType::kF32, -1).ok());
}

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly half way between two bf16 values: ties to even (1.0).
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::nanf("")))));
}

TEST(DType, F16MatchesExactValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
}

TEST(DType, F16RoundTripIsExactOnRepresentableValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const float f = F16ToF32(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), x) << "h=" << h;
  }
}

TEST(DType, F16RoundsToNearest) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (int i = 0; i < 10000; ++i) {
    const float f = dist(rng);
    const float r = F16ToF32(F32ToF16(f));
    // Relative error of round-to-nearest is at most 2^-11.
    ASSERT_LE(std::fabs(r - f), std::fabs(f) * (1.0f / 2048) + 1e-7f) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tandem
