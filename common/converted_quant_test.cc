#include "common/converted_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/quant.h"
#include "common/testing/quant_blocks.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr ConvertedQuant kAll[] = {
    ConvertedQuant::kQ2_K, ConvertedQuant::kQ3_K,   ConvertedQuant::kQ4_K,
    ConvertedQuant::kQ5_K, ConvertedQuant::kQ6_K,   ConvertedQuant::kQ5_0,
    ConvertedQuant::kQ5_1, ConvertedQuant::kIQ4_NL, ConvertedQuant::kIQ4_XS};

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

using testing::PutF16At;
using testing::ScaleOffsets;

// Scales from 1e-5 (f16 subnormals) to 1e-2, as quantizers make them.
std::vector<uint8_t> RandomBlocks(ConvertedQuant t, int64_t n_blocks, std::mt19937& rng) {
  return testing::RandomQuantBlocks(t, n_blocks, 1e-5f, 1e-2f, rng);
}

// Exact conversions: the same f16 scale and int8 quants.
bool IsExact(ConvertedQuant t) {
  return t == ConvertedQuant::kQ5_0 || t == ConvertedQuant::kIQ4_NL;
}

TEST(ConvertedQuant, LayoutSizes) {
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kQ2_K), 84);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kQ3_K), 110);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kQ4_K), 144);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kQ5_K), 176);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kQ6_K), 210);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kQ5_0), 22);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kQ5_1), 24);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kIQ4_NL), 18);
  EXPECT_EQ(ConvertedQuantBlockBytes(ConvertedQuant::kIQ4_XS), 136);
  EXPECT_EQ(ConvertedQuantBlockElems(ConvertedQuant::kIQ4_XS), 256);
  EXPECT_EQ(ConvertedQuantFromGgmlType(23), ConvertedQuant::kIQ4_XS);
  EXPECT_EQ(ConvertedQuantBlockElems(ConvertedQuant::kQ6_K), 256);
  EXPECT_EQ(ConvertedQuantBlockElems(ConvertedQuant::kQ5_1), 32);
  EXPECT_EQ(ConvertedQuantFromGgmlType(20), ConvertedQuant::kIQ4_NL);
  EXPECT_EQ(ConvertedQuantFromGgmlType(12), ConvertedQuant::kQ4_K);
  EXPECT_EQ(ConvertedQuantFromGgmlType(15), std::nullopt);  // Q8_K: activations only
  EXPECT_EQ(ConvertedQuantFromGgmlType(9), std::nullopt);
  EXPECT_EQ(ConvertedQuantComputeType(ConvertedQuant::kQ4_K), DType::kQ4_1);
  EXPECT_EQ(ConvertedQuantComputeType(ConvertedQuant::kQ6_K), DType::kQ8_0);
}

// The reference dequantizer gives exactly what gguf-py's port of ggml's
// dequantize_row_* gives (tests/golden/make_converted_quant_goldens.py).
TEST(ConvertedQuant, DequantizeMatchesGgufPy) {
  for (ConvertedQuant t : kAll) {
    const std::string base =
        std::string(TANDEM_CONVERTED_QUANT_DATA_DIR) + "/" + std::string(ConvertedQuantName(t));
    const std::vector<uint8_t> blocks = ReadBytes(base + ".blocks");
    const std::vector<uint8_t> golden = ReadBytes(base + ".f32");
    ASSERT_FALSE(blocks.empty()) << base;
    const int64_t n_blocks = static_cast<int64_t>(blocks.size()) / ConvertedQuantBlockBytes(t);
    const int64_t n = n_blocks * ConvertedQuantBlockElems(t);
    ASSERT_EQ(golden.size(), static_cast<size_t>(n) * 4) << base;
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    std::memcpy(want.data(), golden.data(), golden.size());
    DequantizeConverted(t, blocks.data(), n, got.data());
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (got[i] != want[i] && ++mismatches <= 5) {
        const int64_t per = ConvertedQuantBlockElems(t);
        ADD_FAILURE() << ConvertedQuantName(t) << " block " << i / per << " element " << i % per
                      << ": " << got[i] << " != " << want[i];
      }
    }
    EXPECT_EQ(mismatches, 0) << ConvertedQuantName(t);
  }
}

// Converted blocks hold the reference values within the bounds converted_quant.h states:
// Q5_0 and IQ4_NL exactly, Q4_K and IQ4_XS with their scales rounded to f16, the others
// requantized to Q8_0.
TEST(ConvertedQuant, ConversionStaysWithinItsBound) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int64_t n = 64 * 256;
  for (ConvertedQuant t : kAll) {
    const std::vector<uint8_t> blocks = RandomBlocks(t, n / ConvertedQuantBlockElems(t), rng);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    DequantizeConverted(t, blocks.data(), n, want.data());
    const DType ct = ConvertedQuantComputeType(t);
    std::vector<uint8_t> converted(static_cast<size_t>(DTypeBytes(ct, n).value()));
    ASSERT_TRUE(ConvertQuantBlocks(t, blocks.data(), n, converted.data()).ok());
    ConvertToF32(ct, converted.data(), n, got.data());
    const auto half_ulp = [](float x) { return std::max(std::fabs(x) * 0x1p-11f, 0x1p-25f); };
    double worst = 0;  // the largest error as a fraction of its bound
    for (int64_t b = 0; b < n / 32; ++b) {
      float bound;
      if (IsExact(t)) {
        bound = 0;
      } else if (t == ConvertedQuant::kIQ4_XS) {
        // The grid's values times the sub-block scale rounded to f16.
        const auto& q = reinterpret_cast<const BlockQ8_0*>(converted.data())[b];
        bound = 127 * half_ulp(F16ToF32(q.d));
      } else if (ct == DType::kQ4_1) {
        const auto& q = reinterpret_cast<const BlockQ4_1*>(converted.data())[b];
        bound = 15 * half_ulp(F16ToF32(q.d)) + half_ulp(F16ToF32(q.m));
      } else {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(want[b * 32 + j]));
        // Half a step, plus the f16 rounding of the step times the largest quant.
        bound = 0.5f * amax / 127 + 127 * half_ulp(amax / 127);
      }
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        // Plus f32 rounding of the two dequantizations (none for the exact ones: the
        // same product of the same two numbers).
        const float err =
            std::fabs(got[i] - want[i]) - (IsExact(t) ? 0 : 2e-7f * std::fabs(want[i]));
        ASSERT_LE(err, bound) << ConvertedQuantName(t) << " block " << b << " element " << j << ": "
                              << got[i] << " vs " << want[i] << ", seed " << seed;
        if (bound > 0) worst = std::max(worst, static_cast<double>(err / bound));
      }
    }
    // The bound is not loose to the point of missing a wrong nibble or scale: a
    // requantization uses most of it, and Q4_K's and IQ4_XS's f16 rounding shows.
    if (!IsExact(t)) {
      const bool requantized = ct == DType::kQ8_0 && t != ConvertedQuant::kIQ4_XS;
      EXPECT_GT(worst, requantized ? 0.3 : 0.05) << ConvertedQuantName(t) << " seed " << seed;
    }
  }
}

// A Q4_K quant in the wrong nibble or sub-block would still be small; check the
// repacking element by element on blocks whose scales f16 holds exactly.
TEST(ConvertedQuant, Q4KRepackingIsExactWhenScalesAre) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int64_t n_blocks = 16, n = n_blocks * 256;
  std::vector<uint8_t> blocks = RandomBlocks(ConvertedQuant::kQ4_K, n_blocks, rng);
  for (int64_t k = 0; k < n_blocks; ++k) {
    // Powers of two times 6-bit integers are f16-exact.
    PutF16At(blocks.data() + k * 144, 0x1p-10f);
    PutF16At(blocks.data() + k * 144 + 2, -0x1p-12f);
  }
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  DequantizeConverted(ConvertedQuant::kQ4_K, blocks.data(), n, want.data());
  std::vector<uint8_t> converted(static_cast<size_t>(DTypeBytes(DType::kQ4_1, n).value()));
  ASSERT_TRUE(ConvertQuantBlocks(ConvertedQuant::kQ4_K, blocks.data(), n, converted.data()).ok());
  ConvertToF32(DType::kQ4_1, converted.data(), n, got.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], want[i]) << "element " << i << " seed " << seed;
  }
}

TEST(ConvertedQuant, ScalesTheTargetCannotHoldAreRefused) {
  std::mt19937 rng(7);
  const auto convert = [](ConvertedQuant t, const std::vector<uint8_t>& blocks) {
    std::vector<uint8_t> out(static_cast<size_t>(
        DTypeBytes(ConvertedQuantComputeType(t), 3 * ConvertedQuantBlockElems(t)).value()));
    return ConvertQuantBlocks(t, blocks.data(), 3 * ConvertedQuantBlockElems(t), out.data());
  };
  for (ConvertedQuant t : kAll) {
    for (float d : {INFINITY, NAN}) {
      std::vector<uint8_t> blocks = RandomBlocks(t, 3, rng);
      PutF16At(blocks.data() + ConvertedQuantBlockBytes(t) + ScaleOffsets(t).first, d);
      const absl::Status st = convert(t, blocks);
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument)
          << ConvertedQuantName(t) << " d " << d;
      EXPECT_NE(st.message().find("block 1"), std::string::npos) << st.message();  // of 3
    }
  }
  // Finite but too large: Q4_K's d * sc = 60000 * 63 overflows Q4_1's f16 scale.
  std::vector<uint8_t> blocks = RandomBlocks(ConvertedQuant::kQ4_K, 3, rng);
  PutF16At(blocks.data() + 144, 60000.0f);
  std::memset(blocks.data() + 144 + 4, 0xFF, 12);  // every scale and min 63
  const absl::Status st = convert(ConvertedQuant::kQ4_K, blocks);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("block 1: sub-block 0"), std::string::npos) << st.message();
}

// The tests' quantizers (common/testing/quant_blocks.h) write blocks that dequantize
// back to their input within the format's noise: a wrong bit layout is off by the
// input's own size. Gaussian data: Q4_K's plain rounding of 6-bit scales leaves an rms
// error of about 5% of the data's (ggml's scale search gets about 3%), Q6_K's about 1%,
// Q5_0's about 4.5% (a step of amax / 16, amax about 2.5 sigma in 32 draws).
TEST(ConvertedQuant, TestQuantizersRoundTrip) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 0.02f);
  const int64_t n = 64 * 256;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (float& v : x) v = gauss(rng);
  struct Case {
    ConvertedQuant type;
    std::vector<uint8_t> blocks;
    double max_rms;
  };
  const Case cases[] = {{ConvertedQuant::kQ4_K, testing::QuantizeQ4_K(x.data(), n), 0.08},
                        {ConvertedQuant::kQ6_K, testing::QuantizeQ6_K(x.data(), n), 0.02},
                        {ConvertedQuant::kQ5_0, testing::QuantizeQ5_0(x.data(), n), 0.06}};
  for (const Case& c : cases) {
    ASSERT_EQ(static_cast<int64_t>(c.blocks.size()),
              n / ConvertedQuantBlockElems(c.type) * ConvertedQuantBlockBytes(c.type));
    DequantizeConverted(c.type, c.blocks.data(), n, y.data());
    double err = 0, sig = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (y[i] - x[i]) * (y[i] - x[i]);
      sig += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / sig), c.max_rms) << ConvertedQuantName(c.type) << " seed " << seed;
    // Q5_0 is ggml's reference quantizer: every element within half a step, except
    // those beyond 15.5 steps on the side opposite the block's largest, whose quant
    // clamps to 31 (up to a whole step off).
    if (c.type == ConvertedQuant::kQ5_0) {
      for (int64_t b = 0; b < n / 32; ++b) {
        uint16_t h;
        std::memcpy(&h, c.blocks.data() + b * 22, 2);
        const float d = std::fabs(F16ToF32(h));
        for (int j = 0; j < 32; ++j) {
          const int64_t i = b * 32 + j;
          const float steps = std::fabs(x[i]) > 15.4f * d ? 1.0f : 0.5f;  // clamped or not
          ASSERT_LE(std::fabs(y[i] - x[i]), steps * d + 16 * d * 0x1p-11f + 1e-9f)
              << "block " << b << " element " << j << " seed " << seed;
        }
      }
    }
  }
}

// Split over threads, a conversion writes the same bytes, and an error names the first
// bad block of the tensor, not of a thread's share.
TEST(ConvertedQuant, ThreadsWriteTheSameBlocksAndReportTheFirstBadOne) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int64_t n = 4 << 20;  // four threads' worth
  for (ConvertedQuant t : {ConvertedQuant::kQ4_K, ConvertedQuant::kQ6_K, ConvertedQuant::kQ5_0}) {
    const int64_t n_blocks = n / ConvertedQuantBlockElems(t);
    std::vector<uint8_t> blocks = testing::RandomQuantBlocks(t, n_blocks, 1e-4f, 1e-2f, rng);
    const size_t out_bytes =
        static_cast<size_t>(DTypeBytes(ConvertedQuantComputeType(t), n).value());
    std::vector<uint8_t> one(out_bytes), four(out_bytes);
    ASSERT_TRUE(ConvertQuantBlocks(t, blocks.data(), n, one.data(), 1).ok());
    ASSERT_TRUE(ConvertQuantBlocks(t, blocks.data(), n, four.data(), 4).ok());
    EXPECT_TRUE(one == four) << ConvertedQuantName(t) << " seed " << seed;
    // Bad blocks in the third and fourth shares: the third's is reported.
    const int64_t bad = n_blocks * 5 / 8, later = n_blocks * 7 / 8;
    for (int64_t k : {later, bad}) {
      PutF16At(blocks.data() + k * ConvertedQuantBlockBytes(t) + ScaleOffsets(t).first, INFINITY);
    }
    const absl::Status st = ConvertQuantBlocks(t, blocks.data(), n, four.data(), 4);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(absl::StrCat("block ", bad)), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace tandem
