// Conversion of stored tensor data (f32/f16/bf16 and GGUF's Q8_0, Q4_0, Q4_1
// blocks) to f32. These loops are the reference that quantized kernels are
// tested against.
#ifndef TANDEM_COMMON_QUANT_H_
#define TANDEM_COMMON_QUANT_H_

#include <cstdint>

#include "common/dtype.h"

namespace tandem {

// Block layouts, as ggml stores them.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // element j in the low nibble of qs[j], j+16 in the high
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);

// Converts `n` consecutive elements starting at `src` to f32. For quantized
// types `n` must be a multiple of 32 (checked by the caller: tensor rows are).
void ConvertToF32(DType t, const void* src, int64_t n, float* dst);

// Quantizes f32 to a block type (used by tests and the checkpoint writer of
// tests); `n` is a multiple of 32. Rounds as ggml's reference quantizers do.
void QuantizeFromF32(DType t, const float* src, int64_t n, void* dst);

}  // namespace tandem

#endif  // TANDEM_COMMON_QUANT_H_
