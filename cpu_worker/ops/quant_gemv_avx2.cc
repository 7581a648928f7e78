// AVX2 kernel for quantized linear layers (CPUs without AVX512-VNNI): one
// 32-element block per 256-bit register, integer products by vpmaddubsw
// (unsigned x signed bytes to int16 pairs) and vpmaddwd (to int32 lanes).
// vpmaddubsw saturates above 32767, so the unsigned operand must stay small:
// Q4 nibbles (0..15) against the signed activations; for Q8_0, llama.cpp's
// sign trick: |x| against w carrying x's sign (|x| <= 127, so no pair
// overflows). As in ggml, a weight byte of -128 facing a negative activation
// reads as +128 there; ggml's quantizers (and ours) never write -128.
#include <immintrin.h>

#include <type_traits>

#include "common/quant.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"

namespace tandem::ops::internal::quant {
namespace {

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType T>
using Block = std::conditional_t<T == DType::kQ8_0, BlockQ8_0,
                                 std::conditional_t<T == DType::kQ4_0, BlockQ4_0, BlockQ4_1>>;

// Block `b` of a weight row: bytes (Q4: nibbles 0..15 in element order)
// and (Q4_1) min. The scales are taken R rows at once (Scales).
template <DType T>
TANDEM_AVX2 inline void LoadBlock(const uint8_t* row, int64_t b, __m256i& wv, __m256& ms) {
  const auto* blk = reinterpret_cast<const Block<T>*>(row) + b;
  if constexpr (T == DType::kQ8_0) {
    wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    const __m256i both =
        _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    wv = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
  }
  if constexpr (T == DType::kQ4_1) ms = _mm256_set1_ps(_cvtsh_ss(blk->m));
}

// The f16 scales of block `b` of R <= 4 rows, widened by one conversion
// into lanes 0 .. R-1 (one per row had each row's widening and spread
// over 8 lanes cost about as much as its dot product on a Zen 1 core).
template <DType T, int R>
TANDEM_AVX2 inline __m128 Scales(const uint8_t* w, int64_t row_bytes, int64_t b) {
  static_assert(R <= 4);
  uint16_t d[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) d[r] = (reinterpret_cast<const Block<T>*>(w + r * row_bytes) + b)->d;
  return _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, static_cast<int16_t>(d[3]),
                                    static_cast<int16_t>(d[2]), static_cast<int16_t>(d[1]),
                                    static_cast<int16_t>(d[0])));
}

template <DType T, int R, int C>
TANDEM_AVX2 void Tile(const Task& t, int64_t j0, int64_t i0) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  const Act256* a0 = static_cast<const Act256*>(t.acts) + i0 * t.act_stride;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < t.groups; ++b) {
    __m256i wv[R];
    __m256 ms[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = t.w + (j0 + r) * t.row_bytes;
      // As in the AVX-512 kernel: ahead of the hardware prefetchers.
      _mm_prefetch(reinterpret_cast<const char*>(row + b * sizeof(Block<T>) + 512), _MM_HINT_T0);
      LoadBlock<T>(row, b, wv[r], ms[r]);
    }
    const __m128 ws = Scales<T, R>(t.w + j0 * t.row_bytes, t.row_bytes, b);
    // Spread over 8 lanes from memory (a load; a spread from a register
    // takes a vector unit).
    alignas(16) float ws_at[4];
    __m256 ws_r[R];
    if constexpr (C > 1) {
      _mm_store_ps(ws_at, ws);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) ws_r[r] = _mm256_broadcast_ss(&ws_at[r]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const Act256* a = a0 + c * t.act_stride + b;
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a->q));
      const __m256 xs = _mm256_broadcast_ss(&a->xs);
      // d_w * d_x of each row: one row of x forms the R products four
      // lanes at once, more rows reuse the rows' spread scales.
      __m256 wx[R];
      if constexpr (C == 1) {
        alignas(16) float wx_at[4];
        _mm_store_ps(wx_at, _mm_mul_ps(ws, _mm256_castps256_ps128(xs)));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) wx[r] = _mm256_broadcast_ss(&wx_at[r]);
      } else {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) wx[r] = _mm256_mul_ps(ws_r[r], xs);
      }
      if constexpr (T == DType::kQ8_0) {
        const __m256i aq = _mm256_sign_epi8(q, q);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256i p16 = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(wv[r], q));
          const __m256i dot = _mm256_madd_epi16(p16, ones);
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), wx[r], acc[r][c]);
        }
      } else if constexpr (T == DType::kQ4_0) {
        const __m256i ci = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a->c.i));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256i dot =
              _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], q), ones), ci);
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), wx[r], acc[r][c]);
        }
      } else {
        const __m256 cf = _mm256_loadu_ps(a->c.f);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], q), ones);
          const __m256 u = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), wx[r],
                                           _mm256_mul_ps(ms[r], cf));
          acc[r][c] = _mm256_add_ps(acc[r][c], u);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float bias = t.bias != nullptr ? t.bias[j0 + r] : 0.0f;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m128 s4 =
          _mm_add_ps(_mm256_castps256_ps128(acc[r][c]), _mm256_extractf128_ps(acc[r][c], 1));
      const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
      t.y[(i0 + c) * t.n + j0 + r] = _mm_cvtss_f32(s1) + bias;
    }
  }
}

template <DType T, int R>
TANDEM_AVX2 void RowGroup(const Task& t, int64_t j0) {
  int64_t i = 0;
  for (; i + 4 <= t.m; i += 4) Tile<T, R, 4>(t, j0, i);
  switch (t.m - i) {
    case 3:
      Tile<T, R, 3>(t, j0, i);
      break;
    case 2:
      Tile<T, R, 2>(t, j0, i);
      break;
    case 1:
      Tile<T, R, 1>(t, j0, i);
      break;
    default:
      break;
  }
}

template <DType T>
TANDEM_AVX2 void Rows(const Task& t, int64_t n0, int64_t n1) {
  int64_t j = n0;
  if (t.m == 1) {
    for (; j + 4 <= n1; j += 4) Tile<T, 4, 1>(t, j, 0);
  } else {
    for (; j + 2 <= n1; j += 2) RowGroup<T, 2>(t, j);
  }
  for (; j < n1; ++j) RowGroup<T, 1>(t, j);
}

template <DType T>
TANDEM_AVX2 void DequantF32(const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t k,
                            float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const Block<T>*>(src + r * row_bytes);
    float* out = dst + r * k;
    for (int64_t i = 0; i < k / 32; ++i, ++b, out += 32) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
      __m128i bytes[2];  // elements 0..15, 16..31 as bytes
      if constexpr (T == DType::kQ8_0) {
        bytes[0] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
        bytes[1] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16));
      } else {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
        bytes[0] = _mm_and_si128(v, _mm_set1_epi8(0x0f));
        bytes[1] = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0f));
      }
      for (int h = 0; h < 2; ++h) {
        for (int e = 0; e < 2; ++e) {
          const __m128i part = e == 0 ? bytes[h] : _mm_srli_si128(bytes[h], 8);
          __m256i q = T == DType::kQ8_0 ? _mm256_cvtepi8_epi32(part) : _mm256_cvtepu8_epi32(part);
          if constexpr (T == DType::kQ4_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
          __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
          if constexpr (T == DType::kQ4_1) f = _mm256_add_ps(f, _mm256_set1_ps(_cvtsh_ss(b->m)));
          _mm256_storeu_ps(out + 16 * h + 8 * e, f);
        }
      }
    }
  }
}

}  // namespace

void DequantRowsF32Avx2(DType t, const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t k,
                        float* dst) {
  switch (t) {
    case DType::kQ8_0:
      return DequantF32<DType::kQ8_0>(src, row_bytes, rows, k, dst);
    case DType::kQ4_0:
      return DequantF32<DType::kQ4_0>(src, row_bytes, rows, k, dst);
    case DType::kQ4_1:
      return DequantF32<DType::kQ4_1>(src, row_bytes, rows, k, dst);
    default:
      break;
  }
}

void RowsAvx2(const Task& t, int64_t n0, int64_t n1) {
  switch (t.t) {
    case DType::kQ8_0:
      return Rows<DType::kQ8_0>(t, n0, n1);
    case DType::kQ4_0:
      return Rows<DType::kQ4_0>(t, n0, n1);
    case DType::kQ4_1:
      return Rows<DType::kQ4_1>(t, n0, n1);
    default:
      break;
  }
}

}  // namespace tandem::ops::internal::quant
