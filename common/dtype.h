// Element types of tensors, including GGUF's block-quantized formats.
#ifndef TANDEM_COMMON_DTYPE_H_
#define TANDEM_COMMON_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // blocks of 32: f16 scale + 32 x int8
  kQ4_0,  // blocks of 32: f16 scale + 16 bytes of nibbles, value = (q - 8) * d
  kQ4_1,  // blocks of 32: f16 scale, f16 min + 16 bytes of nibbles, value = q * d + m
  kI32,
};

std::string_view DTypeName(DType t);
// Elements per block: 1 for plain types, 32 for the quantized ones.
int64_t DTypeBlockElems(DType t);
// Bytes per block (per element for plain types).
int64_t DTypeBlockBytes(DType t);
bool DTypeIsQuantized(DType t);
// Bytes that `n` elements take; an error if `n` is not a whole number of blocks.
absl::StatusOr<int64_t> DTypeBytes(DType t, int64_t n);

// Scalar conversions. bf16/f16 are stored as raw uint16_t.
inline float Bf16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even, NaN preserved (as torch does).
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

}  // namespace tandem

#endif  // TANDEM_COMMON_DTYPE_H_
