// One GGUF block (Q8_0, Q4_0 or Q4_1: 32 weights) to 32 bf16 values with
// AVX512-BF16: d * q (+ m) is formed exactly in f32, then rounded to
// nearest even. Shared by the dequantized-panel GEMM path
// (quant_gemv_avx512.cc) and the AMX kernel, which dequantizes a block
// column at a time into its tiles (amx_linear.cc), so both round the same.
// Internal to ops; callers compile for at least TANDEM_DEQUANT_BF16_TARGET.
#ifndef TANDEM_CPU_WORKER_OPS_DEQUANT_BF16_H_
#define TANDEM_CPU_WORKER_OPS_DEQUANT_BF16_H_

#include <cstdint>
#include <type_traits>

#include "common/dtype.h"
#include "common/quant.h"
#include "cpu_worker/ops/intrinsics.h"

#define TANDEM_DEQUANT_BF16_TARGET "avx512f,avx512bw,avx512vl,avx512bf16,f16c"

namespace tandem::ops::internal {

template <DType T>
using QuantBlock = std::conditional_t<T == DType::kQ8_0, BlockQ8_0,
                                      std::conditional_t<T == DType::kQ4_0, BlockQ4_0, BlockQ4_1>>;

// The block at `src` (a QuantBlock<T>) to out[0..31] (bf16 bits).
template <DType T>
__attribute__((target(TANDEM_DEQUANT_BF16_TARGET), always_inline)) inline void DequantBlockBf16(
    const void* src, uint16_t* out) {
  const auto* b = static_cast<const QuantBlock<T>*>(src);
  const __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
  __m512i lo, hi;
  if constexpr (T == DType::kQ8_0) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
    lo = _mm512_cvtepi8_epi32(_mm256_castsi256_si128(q));
    hi = _mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i mask = _mm_set1_epi8(0x0f);
    lo = _mm512_cvtepu8_epi32(_mm_and_si128(v, mask));
    hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), mask));
    if constexpr (T == DType::kQ4_0) {
      lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(8));
      hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(8));
    }
  }
  __m512 flo = _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d);
  __m512 fhi = _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d);
  if constexpr (T == DType::kQ4_1) {
    const __m512 m = _mm512_set1_ps(_cvtsh_ss(b->m));
    flo = _mm512_add_ps(flo, m);
    fhi = _mm512_add_ps(fhi, m);
  }
  _mm512_storeu_si512(out, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(fhi, flo)));
}

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_DEQUANT_BF16_H_
