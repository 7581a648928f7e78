// Small math helpers written so that the compiler vectorises them inside
// `#pragma omp simd` loops: no libm calls, no branches. The clamps are
// if-converted only without -ftrapping-math, which tandem_cpu_ops sets.
// Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_VEC_MATH_H_
#define TANDEM_CPU_WORKER_OPS_VEC_MATH_H_

#include <bit>
#include <cstdint>

namespace tandem::ops::internal {

// exp(x) in f32 with a relative error below 3e-7 (Cephes' expf polynomial),
// over the whole range: results underflow gradually to subnormals and zero,
// overflow to inf, and NaN stays NaN.
inline float ExpApprox(float x) {
  constexpr float kHi = 88.8f;    // exp(88.73) > FLT_MAX
  constexpr float kLo = -104.5f;  // exp(-104.5) < half the smallest subnormal
  float c = x > kHi ? kHi : x;    // NaN passes both clamps
  c = c < kLo ? kLo : c;
  // n = round(c * log2(e)) by the 1.5 * 2^23 trick: the sum's low mantissa
  // bits hold n, no float -> int conversion needed.
  constexpr float kMagic = 12582912.0f;
  const float kn = c * 1.44269504088896341f + kMagic;
  const float fn = kn - kMagic;
  const int32_t n =
      static_cast<int32_t>(std::bit_cast<uint32_t>(kn) - std::bit_cast<uint32_t>(kMagic));
  // r = c - n * ln2 in [-ln2/2, ln2/2], with ln2 split in two for precision.
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
  // 2^n as two normal powers of two (n is in [-151, 129]), so that the
  // products round to subnormals or overflow exactly as exp would.
  const int32_t n1 = n >> 1;
  const int32_t n2 = n - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return y * s1 * s2;
}

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_VEC_MATH_H_
