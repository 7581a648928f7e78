#include "cpu_worker/ops/gemv.h"

// GCC 12's AVX-512 headers build their "undefined" operands from
// self-initialised locals, which -W(maybe-)uninitialized reports wherever
// the intrinsics are inlined into a function with a target attribute (GCC
// PR 105593). The reports point into the header, so silencing them around
// its inclusion silences exactly those.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <bit>
#include <vector>

#include "common/status_macros.h"
#include "cpu_worker/ops/cpu_features.h"

namespace tandem::ops::internal {
namespace {

// ---------------------------------------------------------------------------
// Portable kernel (compiler-vectorised): one weight row at a time.

template <typename W>
float WeightToF32(W v);
template <>
inline float WeightToF32<float>(float v) {
  return v;
}
template <>
inline float WeightToF32<uint16_t>(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}

template <typename W>
inline void RowsPortable(const float* x, int64_t m, const W* w, int64_t n, int64_t k,
                         const float* bias, int64_t n0, int64_t n1, float* y) {
  for (int64_t j = n0; j < n1; ++j) {
    const W* wr = w + j * k;
    const float b = bias != nullptr ? bias[j] : 0.0f;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t l = 0; l < k; ++l) acc += xr[l] * WeightToF32(wr[l]);
      y[i * n + j] = acc + b;
    }
  }
}

__attribute__((target_clones("avx2", "default"))) void RowsPortableF32(const float* x, int64_t m,
                                                                       const float* w, int64_t n,
                                                                       int64_t k, const float* bias,
                                                                       int64_t n0, int64_t n1,
                                                                       float* y) {
  RowsPortable(x, m, w, n, k, bias, n0, n1, y);
}

__attribute__((target_clones("avx2", "default"))) void RowsPortableBf16(
    const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, const float* bias,
    int64_t n0, int64_t n1, float* y) {
  RowsPortable(x, m, w, n, k, bias, n0, n1, y);
}

// ---------------------------------------------------------------------------
// AVX-512 kernel: R weight rows x C rows of x held in R * C accumulators, so
// that enough independent FMA chains are in flight; each weight vector is
// loaded once per C rows of x.

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

TANDEM_AVX512 inline __m512 LoadW(const float* p, __mmask16 mask) {
  return _mm512_maskz_loadu_ps(mask, p);
}
TANDEM_AVX512 inline __m512 LoadW(const uint16_t* p, __mmask16 mask) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int R, int C, typename W>
TANDEM_AVX512 inline void MicroKernel(const float* x, const W* w, int64_t n, int64_t k,
                                      const float* bias, int64_t i0, int64_t j0, float* y) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t l = 0; l < k; l += 16) {
    const __mmask16 mask =
        k - l >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (k - l)) - 1);
    __m512 xv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) xv[c] = _mm512_maskz_loadu_ps(mask, x + (i0 + c) * k + l);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 wv = LoadW(w + (j0 + r) * k + l, mask);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(xv[c], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float b = bias != nullptr ? bias[j0 + r] : 0.0f;
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) y[(i0 + c) * n + j0 + r] = _mm512_reduce_add_ps(acc[r][c]) + b;
  }
}

// All m rows of x against weight rows [n0, n1).
template <int R, typename W>
TANDEM_AVX512 inline void RowBlock(const float* x, int64_t m, const W* w, int64_t n, int64_t k,
                                   const float* bias, int64_t j0, float* y) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) MicroKernel<R, 4>(x, w, n, k, bias, i, j0, y);
  switch (m - i) {
    case 3:
      MicroKernel<R, 3>(x, w, n, k, bias, i, j0, y);
      break;
    case 2:
      MicroKernel<R, 2>(x, w, n, k, bias, i, j0, y);
      break;
    case 1:
      MicroKernel<R, 1>(x, w, n, k, bias, i, j0, y);
      break;
    default:
      break;
  }
}

// bf16 weights, AVX-512: a 64-byte load holds 32 weights; shifting each
// dword left by 16 gives the even elements as f32, masking off its low half
// the odd ones, so widening costs two instructions per 32 weights (instead
// of four for two vpmovzxwd + vpslld). x is split beforehand into its even
// and odd elements, each zero-padded to `kh` (a multiple of 16) floats per
// row. The products are the same exact f32 products as the generic kernel.
// The software prefetch (1 KiB ahead in each row) made a pass from DRAM
// ~15% faster in linear_bench (m = 1, cold), with no change from cache.
template <int R, int C>
TANDEM_AVX512 inline void MicroKernelBf16(const float* xe, const float* xo, int64_t kh,
                                          const uint16_t* w, int64_t n, int64_t k,
                                          const float* bias, int64_t i0, int64_t j0, float* y) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t l = 0; l < k; l += 32) {
    const __mmask32 mask =
        k - l >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1ull << (k - l)) - 1);
    __m512 ev[C], od[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      ev[c] = _mm512_loadu_ps(xe + (i0 + c) * kh + l / 2);
      od[c] = _mm512_loadu_ps(xo + (i0 + c) * kh + l / 2);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint16_t* p = w + (j0 + r) * k + l;
      _mm_prefetch(reinterpret_cast<const char*>(p + 512), _MM_HINT_T0);
      const __m512i wv = _mm512_maskz_loadu_epi16(mask, p);
      const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
      const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(wv, hi_mask));
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        acc[r][c] = _mm512_fmadd_ps(ev[c], we, acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(od[c], wo, acc[r][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float b = bias != nullptr ? bias[j0 + r] : 0.0f;
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) y[(i0 + c) * n + j0 + r] = _mm512_reduce_add_ps(acc[r][c]) + b;
  }
}

template <int R>
TANDEM_AVX512 inline void RowBlockBf16(const float* xe, const float* xo, int64_t kh, int64_t m,
                                       const uint16_t* w, int64_t n, int64_t k, const float* bias,
                                       int64_t j0, float* y) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) MicroKernelBf16<R, 4>(xe, xo, kh, w, n, k, bias, i, j0, y);
  switch (m - i) {
    case 3:
      MicroKernelBf16<R, 3>(xe, xo, kh, w, n, k, bias, i, j0, y);
      break;
    case 2:
      MicroKernelBf16<R, 2>(xe, xo, kh, w, n, k, bias, i, j0, y);
      break;
    case 1:
      MicroKernelBf16<R, 1>(xe, xo, kh, w, n, k, bias, i, j0, y);
      break;
    default:
      break;
  }
}

TANDEM_AVX512 void RowsAvx512Bf16(const float* xe, const float* xo, int64_t kh, int64_t m,
                                  const uint16_t* w, int64_t n, int64_t k, const float* bias,
                                  int64_t n0, int64_t n1, float* y) {
  int64_t j = n0;
  if (m == 1) {
    for (; j + 8 <= n1; j += 8) MicroKernelBf16<8, 1>(xe, xo, kh, w, n, k, bias, 0, j, y);
  }
  for (; j + 4 <= n1; j += 4) RowBlockBf16<4>(xe, xo, kh, m, w, n, k, bias, j, y);
  for (; j < n1; ++j) RowBlockBf16<1>(xe, xo, kh, m, w, n, k, bias, j, y);
}

template <typename W>
TANDEM_AVX512 void RowsAvx512(const float* x, int64_t m, const W* w, int64_t n, int64_t k,
                              const float* bias, int64_t n0, int64_t n1, float* y) {
  int64_t j = n0;
  if (m == 1) {
    // One row of x: eight weight rows give eight independent chains.
    for (; j + 8 <= n1; j += 8) MicroKernel<8, 1>(x, w, n, k, bias, 0, j, y);
  }
  for (; j + 4 <= n1; j += 4) RowBlock<4>(x, m, w, n, k, bias, j, y);
  for (; j < n1; ++j) RowBlock<1>(x, m, w, n, k, bias, j, y);
}

bool UseAvx512() { return MaxKernelIsa() >= KernelIsa::kAvx512; }

}  // namespace

void SmallBatchLinear(const float* x, int64_t m, const void* w, bool w_bf16, int64_t n, int64_t k,
                      const float* bias, float* y, bool allow_avx512) {
  TANDEM_CHECK(m >= 0 && n > 0 && k > 0);
  if (m == 0) return;
  const bool avx512 = allow_avx512 && UseAvx512();
  // Blocks of weight rows: small enough to balance threads, large enough to
  // keep the per-block overhead negligible.
  constexpr int64_t kBlock = 32;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool parallel = n * k * m > (1 << 15);
  // bf16 on AVX-512: x split into even and odd elements (this thread's
  // scratch, read by all; grown once).
  thread_local std::vector<float> split;
  const int64_t kh = (k + 31) / 32 * 16;
  const float* xe = nullptr;
  const float* xo = nullptr;
  if (w_bf16 && avx512) {
    if (static_cast<int64_t>(split.size()) < 2 * m * kh) {
      split.resize(static_cast<size_t>(2 * m * kh));
    }
    float* e = split.data();
    float* o = e + m * kh;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t h = 0; h < kh; ++h) {
        e[i * kh + h] = 2 * h < k ? x[i * k + 2 * h] : 0.0f;
        o[i * kh + h] = 2 * h + 1 < k ? x[i * k + 2 * h + 1] : 0.0f;
      }
    }
    xe = e;
    xo = o;
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * kBlock;
    const int64_t n1 = std::min(n, n0 + kBlock);
    if (w_bf16) {
      const auto* wb = static_cast<const uint16_t*>(w);
      if (avx512) {
        RowsAvx512Bf16(xe, xo, kh, m, wb, n, k, bias, n0, n1, y);
      } else {
        RowsPortableBf16(x, m, wb, n, k, bias, n0, n1, y);
      }
    } else {
      const auto* wf = static_cast<const float*>(w);
      if (avx512) {
        RowsAvx512(x, m, wf, n, k, bias, n0, n1, y);
      } else {
        RowsPortableF32(x, m, wf, n, k, bias, n0, n1, y);
      }
    }
  }
}

}  // namespace tandem::ops::internal
