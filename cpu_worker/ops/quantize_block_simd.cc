// QuantizeBlock (quant_gemv_kernels.h) on 16 and on 8 lanes, for the int8
// kernels' activations. The scalar loop calls libm's nearbyintf once per
// value (no SSE4.1 in the baseline ISA it is compiled for): on the AMD EPYC
// VM that took 5 us of the 55 us in which a 2816 x 1024 Q8_0 expert matrix
// streams for one row, on one thread while the other waited (MoE decode,
// perf). These give the same bits: the same maximum of |x|, the same IEEE
// divisions for d and 1/d, the same product, and vcvtps2dq rounds to
// nearest even under the default MXCSR, as std::nearbyint does.
#include <cstdint>

#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"

namespace tandem::ops::internal::quant {
namespace {

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TANDEM_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// d and 1/d (0 for an all-zero block) from the block's largest |x|.
inline float Reciprocal(float amax, float* d) {
  *d = amax / 127.0f;
  return *d != 0.0f ? 1.0f / *d : 0.0f;
}

// The sums of q[4l .. 4l + 3] for the eight dword lanes l of a block: bytes
// times 1 pairwise to int16 (vpmaddubsw, the unsigned operand the ones),
// then pairs of int16 to int32 (vpmaddwd).
TANDEM_AVX2 inline void StoreLaneSums(__m256i q, int32_t* lane_sums) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane_sums),
                      _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

}  // namespace

TANDEM_AVX512 float QuantizeBlockAvx512(const float* x, int8_t* q,
                                        int32_t* lane_sums) {
  const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
  float d;
  const float id = Reciprocal(
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi))),
      &d);
  const __m512 scale = _mm512_set1_ps(id);
  const __m512i min_q = _mm512_set1_epi32(-127), max_q = _mm512_set1_epi32(127);
  const __m512i qlo = _mm512_min_epi32(
      _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(lo, scale)), min_q),
      max_q);
  const __m512i qhi = _mm512_min_epi32(
      _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(hi, scale)), min_q),
      max_q);
  const __m256i bytes =
      _mm256_setr_m128i(_mm512_cvtepi32_epi8(qlo), _mm512_cvtepi32_epi8(qhi));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
  StoreLaneSums(bytes, lane_sums);
  return d;
}

TANDEM_AVX2 float QuantizeBlockAvx2(const float* x, int8_t* q,
                                    int32_t* lane_sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m4 =
      _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float d;
  const __m256 scale = _mm256_set1_ps(Reciprocal(_mm_cvtss_f32(m4), &d));
  __m256i n[4];
  for (int i = 0; i < 4; ++i) {
    n[i] = _mm256_min_epi32(
        _mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], scale)),
                         _mm256_set1_epi32(-127)),
        _mm256_set1_epi32(127));
  }
  // The packs interleave 128-bit lanes: dwords come out in the order
  // 0, 2, 4, 6, 1, 3, 5, 7 of the values' groups of four.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]),
                                            _mm256_packs_epi32(n[2], n[3]));
  const __m256i bytes = _mm256_permutevar8x32_epi32(
      packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
  StoreLaneSums(bytes, lane_sums);
  return d;
}

}  // namespace tandem::ops::internal::quant
