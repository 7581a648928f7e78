// Random blocks of the GGUF formats Tandem converts at load (common/converted_quant.h),
// for tests: Tandem has no quantizer for them.
#ifndef TANDEM_COMMON_TESTING_QUANT_BLOCKS_H_
#define TANDEM_COMMON_TESTING_QUANT_BLOCKS_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/converted_quant.h"

namespace tandem::testing {

// Byte offsets of the f16 scale d and min/super-min (-1: the type has none) inside a
// block of `t`.
std::pair<int, int> ScaleOffsets(ConvertedQuant t);

// `n_blocks` blocks of random bytes (every bit pattern of the quants and packed
// sub-scales is legal) whose d and min are set to |value| uniform in [lo, hi], each
// negative with probability 0.3.
std::vector<uint8_t> RandomQuantBlocks(ConvertedQuant t, int64_t n_blocks, float lo, float hi,
                                       std::mt19937& rng);

// Random blocks whose values stay within about +-max_abs: the scales are set from the
// largest product of sub-scale and quant the type can hold.
std::vector<uint8_t> RandomQuantWeights(ConvertedQuant t, int64_t n_blocks, float max_abs,
                                        std::mt19937& rng);

// Simple quantizers for tests that need real weights in these formats (Tandem itself
// never writes them): per (sub-)block min/max scales, rounded to nearest. `n` is a
// multiple of the block. Q4_K and Q6_K are plain-rounding versions of ggml's (which
// also search the scales); Q5_0 is ggml's quantize_row_q5_0_ref.
std::vector<uint8_t> QuantizeQ4_K(const float* x, int64_t n);
std::vector<uint8_t> QuantizeQ6_K(const float* x, int64_t n);
std::vector<uint8_t> QuantizeQ5_0(const float* x, int64_t n);

// Writes `v` as f16 at `p` (which need not be aligned).
void PutF16At(uint8_t* p, float v);

}  // namespace tandem::testing

#endif  // TANDEM_COMMON_TESTING_QUANT_BLOCKS_H_
