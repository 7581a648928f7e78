// GGUF block formats that Tandem converts when it loads them: the k-quants (ggml types
// Q2_K .. Q6_K: superblocks of 256 elements with 16- or 32-element sub-blocks, each with
// its own 4-, 6- or 8-bit scale and min under an f16 super-scale), which most published
// GGUF files (Q4_K_M, Q5_K_M, ...) are made of; IQ4_XS (superblocks of IQ4_NL's
// non-linear 4-bit grid with 6-bit sub-block scales); and the 32-element Q5_0, Q5_1 and
// IQ4_NL, which llama.cpp writes in their place for tensors whose rows are not whole
// superblocks (widths such as 576 or 896).
//
// Tandem's kernels compute on Q8_0, Q4_0 and Q4_1 blocks of 32, so such a tensor is
// converted to one of those when it is first used (GgufCheckpoint):
//
//   Q5_0, IQ4_NL -> Q8_0: exact. The same f16 scale; the 5-bit quant minus 16, or the
//                 IQ4_NL table's int8 value, is the int8 quant. 8.5 bits a weight
//                 against 5.5 and 4.5.
//   Q4_K -> Q4_1: the same 4-bit quants, each 32-element sub-block's scale d*sc and min
//                 dmin*m rounded to f16. Per weight, |error| <= 15 e(scale) + e(min),
//                 e(x) = max(|x| 2^-11, 2^-25) (f16's half ulp). 5.0 bits a weight
//                 against 4.5.
//   IQ4_XS -> Q8_0: the grid's int8 values, each sub-block's scale d * (ls - 32)
//                 rounded to f16: |error| <= 127 e(scale). 8.5 bits a weight against
//                 4.25.
//   Q2_K, Q3_K, Q5_K, Q6_K, Q5_1 -> Q8_0: dequantized, then requantized by blocks of 32
//                 as ggml's quantize_row_q8_0_ref does: |error| <= s/2 + 127 e(s) per
//                 weight, s = amax / 127 (amax the block's largest |value|), so 0.56 s
//                 while s is a normal f16: under a quarter of Q6_K's own step. 8.5 bits a
//                 weight: 3.2x Q2_K, 2.5x Q3_K, 1.55x Q5_K, 1.4x Q5_1, 1.3x Q6_K.
//
// DequantizeConverted is the reference those conversions and their tests rest on; it
// is checked against gguf-py's port of ggml's dequantize_row_*
// (tests/golden/make_converted_quant_goldens.py).
#ifndef TANDEM_COMMON_CONVERTED_QUANT_H_
#define TANDEM_COMMON_CONVERTED_QUANT_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace tandem {

// Values are ggml's type ids.
enum class ConvertedQuant : uint32_t {
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
};

// nullopt for ids of types Tandem does not convert (Q8_K is ggml's activation type).
std::optional<ConvertedQuant> ConvertedQuantFromGgmlType(uint32_t ggml_type);
std::string_view ConvertedQuantName(ConvertedQuant t);
// Elements of one block: 256 for the k-quants, 32 for the others.
int64_t ConvertedQuantBlockElems(ConvertedQuant t);
// Bytes of one block: Q2_K 84, Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210, Q5_0 22,
// Q5_1 24, IQ4_NL 18, IQ4_XS 136.
int64_t ConvertedQuantBlockBytes(ConvertedQuant t);
// Q4_1 for Q4_K, Q8_0 for the others.
DType ConvertedQuantComputeType(ConvertedQuant t);

// Reference: `n` elements (a whole number of blocks) to f32, exactly as ggml's
// dequantize_row_* computes them.
void DequantizeConverted(ConvertedQuant t, const void* src, int64_t n, float* dst);

// Converts `n` elements (a whole number of blocks) to ConvertedQuantComputeType(t)
// blocks at `dst` (DTypeBytes(ConvertedQuantComputeType(t), n) bytes), on up to
// `threads` threads (one per 1M elements at most). InvalidArgument, naming the first
// bad block, when a value or scale is not finite or does not fit the target's f16
// scales.
absl::Status ConvertQuantBlocks(ConvertedQuant t, const void* src, int64_t n, void* dst,
                                int threads = 1);

}  // namespace tandem

#endif  // TANDEM_COMMON_CONVERTED_QUANT_H_
