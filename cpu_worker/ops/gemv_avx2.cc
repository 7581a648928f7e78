#include "cpu_worker/ops/gemv_avx2.h"

#include <cstring>

#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal {
namespace {

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

// Weight rows read side by side: 2 accumulators each, 8 of the 16 vector
// registers, with the chunk of x and the widened weights in the rest.
constexpr int kRows = 4;

// 16 weights as two f32 vectors, exactly: for bf16 the even (shifted up)
// and the odd (low half masked off) elements, for f16 the first and the
// last 8.
template <GemvWeight F>
TANDEM_AVX2 inline void Widen(__m256i v, __m256* even, __m256* odd) {
  if constexpr (F == GemvWeight::kBF16) {
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *odd = _mm256_castsi256_ps(
        _mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  } else {
    *even = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
    *odd = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
  }
}

// The last, partial chunk of a row, zero past k (so that no weight beyond
// the row is read, and 0 * anything past k is never formed from a NaN).
TANDEM_AVX2 inline __m256i LoadTail(const uint16_t* p, int64_t rem) {
  alignas(32) uint16_t tmp[kAvx2Chunk] = {};
  std::memcpy(tmp, p, static_cast<size_t>(rem) * sizeof(uint16_t));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
}

// The 8 lanes of v summed by a fixed tree: halves, then pairs, then the two.
TANDEM_AVX2 inline float Reduce(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The one accumulation step: 16 weights `v` widened, times chunk `xc` of
// x as SplitXAvx2 lays it out (evens, then odds; for f16 in order). Every
// path takes it, so a row's result does not depend on the path, i.e. on m.
template <GemvWeight F>
TANDEM_AVX2 inline void Step(const float* xc, __m256i v, __m256& ae, __m256& ao) {
  __m256 we, wo;
  Widen<F>(v, &we, &wo);
  ae = _mm256_fmadd_ps(_mm256_loadu_ps(xc), we, ae);
  ao = _mm256_fmadd_ps(_mm256_loadu_ps(xc + 8), wo, ao);
}

// R weight rows from `w0` (k apart) against one row of x.
template <GemvWeight F, int R>
TANDEM_AVX2 inline void Tile(const float* xs, const uint16_t* w0, int64_t k, const float* bias,
                             float* y) {
  __m256 ae[R], ao[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) ae[r] = ao[r] = _mm256_setzero_ps();
  const int64_t full = k / kAvx2Chunk;
  for (int64_t c = 0; c < full; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint16_t* p = w0 + r * k + c * kAvx2Chunk;
      Step<F>(xs + c * kAvx2Chunk, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
              ae[r], ao[r]);
    }
  }
  if (const int64_t rem = k - full * kAvx2Chunk; rem > 0) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      Step<F>(xs + full * kAvx2Chunk, LoadTail(w0 + r * k + full * kAvx2Chunk, rem), ae[r],
              ao[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    y[r] = Reduce(_mm256_add_ps(ae[r], ao[r])) + (bias != nullptr ? bias[r] : 0.0f);
  }
}

// One row of x against weight row j alone, with Tile's arithmetic (Step
// and Reduce), the weight read as one stream
// fetched kStreamAheadBytes ahead across row ends, never past the weight's
// end (stream_prefetch.h): rows one after the other read 40-54 GB/s of
// bf16 on the AMD EPYC VM against 34-41 for 4 rows k apart as in the
// tiles, and the fetches took 40-43 to 45-48.
template <GemvWeight F, PrefetchLevel L>
TANDEM_AVX2 inline void StreamRow(const float* xs, const uint16_t* w, int64_t n, int64_t k,
                                  const float* bias, int64_t j, float* y) {
  constexpr int64_t kAhead = kStreamAheadBytes / sizeof(uint16_t);
  const uint16_t* row = w + j * k;
  const uint16_t* fetch_end = w + n * k - kAhead;
  __m256 ae = _mm256_setzero_ps(), ao = _mm256_setzero_ps();
  const int64_t full = k / kAvx2Chunk;
  for (int64_t c = 0; c < full; ++c) {
    const uint16_t* p = row + c * kAvx2Chunk;
    if ((c & 1) == 0 && p < fetch_end) PrefetchLine<L>(p + kAhead);  // a line per 2 chunks
    Step<F>(xs + c * kAvx2Chunk, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), ae,
            ao);
  }
  if (const int64_t rem = k - full * kAvx2Chunk; rem > 0) {
    Step<F>(xs + full * kAvx2Chunk, LoadTail(row + full * kAvx2Chunk, rem), ae, ao);
  }
  y[j] = Reduce(_mm256_add_ps(ae, ao)) + (bias != nullptr ? bias[j] : 0.0f);
}

template <GemvWeight F>
TANDEM_AVX2 void RowsAvx2(const float* xs, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                          const float* bias, int64_t n0, int64_t n1, float* y) {
  const int64_t row_floats = (k + kAvx2Chunk - 1) / kAvx2Chunk * kAvx2Chunk;
  int64_t j = n0;
  if (m == 1) {
    if (StreamPrefetchLevel() == PrefetchLevel::kL2) {
      for (; j < n1; ++j) StreamRow<F, PrefetchLevel::kL2>(xs, w, n, k, bias, j, y);
    } else {
      for (; j < n1; ++j) StreamRow<F, PrefetchLevel::kL1>(xs, w, n, k, bias, j, y);
    }
    return;
  }
  // Weight rows [j, j + kRows) against every row of x in turn: the tile's
  // rows come from memory for the first and from the cache for the others.
  float out[kRows];
  for (; j + kRows <= n1; j += kRows) {
    for (int64_t i = 0; i < m; ++i) {
      Tile<F, kRows>(xs + i * row_floats, w + j * k, k, bias != nullptr ? bias + j : nullptr,
                     out);
      std::memcpy(y + i * n + j, out, sizeof(out));
    }
  }
  for (; j < n1; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      Tile<F, 1>(xs + i * row_floats, w + j * k, k, bias != nullptr ? bias + j : nullptr, out);
      y[i * n + j] = out[0];
    }
  }
}

}  // namespace

TANDEM_AVX2 void SplitXAvx2(const float* x, int64_t m, int64_t k, GemvWeight wt, float* xs) {
  const int64_t chunks = (k + kAvx2Chunk - 1) / kAvx2Chunk;
  // bf16 pairs element 2t with lane t of the first vector and 2t + 1 with
  // lane t of the second; f16 element t with lane t % 8 of vector t / 8.
  const bool pairs = wt == GemvWeight::kBF16;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    for (int64_t c = 0; c < chunks; ++c) {
      float* out = xs + (i * chunks + c) * kAvx2Chunk;
      for (int t = 0; t < 8; ++t) {
        const int64_t a = c * kAvx2Chunk + (pairs ? 2 * t : t);
        const int64_t b = c * kAvx2Chunk + (pairs ? 2 * t + 1 : t + 8);
        out[t] = a < k ? row[a] : 0.0f;
        out[8 + t] = b < k ? row[b] : 0.0f;
      }
    }
  }
}

void RowsAvx2Half(const float* xs, int64_t m, const uint16_t* w, GemvWeight wt, int64_t n,
                  int64_t k, const float* bias, int64_t n0, int64_t n1, float* y) {
  if (wt == GemvWeight::kF16) {
    RowsAvx2<GemvWeight::kF16>(xs, m, w, n, k, bias, n0, n1, y);
  } else {
    RowsAvx2<GemvWeight::kBF16>(xs, m, w, n, k, bias, n0, n1, y);
  }
}

}  // namespace tandem::ops::internal
