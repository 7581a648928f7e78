// Small math helpers written so that the compiler vectorises them inside
// `#pragma omp simd` loops (no libm calls, no branches). Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_VEC_MATH_H_
#define TANDEM_CPU_WORKER_OPS_VEC_MATH_H_

#include <bit>
#include <cstdint>

namespace tandem::ops::internal {

// exp(x) in f32 with a relative error below 3e-7 (Cephes' expf polynomial).
// Results below ~1e-38 flush to zero, above ~3.4e38 give inf; NaN stays NaN.
inline float ExpApprox(float x) {
  constexpr float kHi = 88.3762626647949f;
  constexpr float kLo = -88.3762626647949f;
  float c = x < kHi ? x : kHi;
  c = c > kLo ? c : kLo;
  // n = round(c / ln2) via truncation of c * log2(e) + 0.5, floored.
  const float fx = c * 1.44269504088896341f + 0.5f;
  int32_t n = static_cast<int32_t>(fx);
  n -= static_cast<float>(n) > fx ? 1 : 0;
  const float fn = static_cast<float>(n);
  // r = c - n * ln2, with ln2 split in two for precision.
  float r = c - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  // 2^n by building the exponent field; n = -127 gives +0.
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  const float result = y * scale;
  return x == x ? result : x;
}

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_VEC_MATH_H_
