#include "cpu_worker/ops/gemv_avx2.h"

#include <cstring>

#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal {
namespace {

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

// Rows of x one weight row is streamed against at once: 2 accumulators
// each, 12 of the 16 vector registers, with the widened weights and a
// chunk of x in the rest. With 4, 12 and 16 rows of x ran 108 and 105-110
// GFLOP/s against 146-153 and 154-159 with 6 (4096 x 4096 bf16, cold).
constexpr int kXRows = 6;

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

// The one accumulation step: 16 widened weights times chunk `xc` of x as
// SplitXAvx2 lays it out (evens, then odds; for f16 in order). Every row of
// x takes it, whatever the rows beside it, so a row's result does not
// depend on m.
TANDEM_AVX2 inline void Step(const float* xc, __m256 we, __m256 wo, __m256& ae, __m256& ao) {
  ae = _mm256_fmadd_ps(_mm256_loadu_ps(xc), we, ae);
  ao = _mm256_fmadd_ps(_mm256_loadu_ps(xc + 8), wo, ao);
}

// Weight row j against rows [i0, i0 + C) of x (their regrouped rows
// `row_floats` apart in xs): each 16 weights are loaded and widened once
// for all C rows. With `fetch`, the weight is read as one stream fetched
// kStreamAheadBytes ahead across row ends, never past the weight's end
// (stream_prefetch.h): rows one after the other read 40-54 GB/s of bf16
// on the AMD EPYC VM against 34-41 for 4 rows k apart, and the fetches
// took 40-43 to 45-48. The later groups of rows of x find the row in L1.
// (Before, 2-6 rows of x took 4 weight rows at a time against one row of
// x, widening every weight once per row of x: 82 GFLOP/s at 4 rows and
// 122 at 16, against 145-150 and 154-159 now.)
template <GemvWeight F, int C, PrefetchLevel L>
TANDEM_AVX2 inline void StreamRow(const float* xs, int64_t row_floats, const uint16_t* w,
                                  int64_t n, int64_t k, const float* bias, int64_t j, int64_t i0,
                                  bool fetch, float* y) {
  constexpr int64_t kAhead = kStreamAheadBytes / sizeof(uint16_t);
  const uint16_t* row = w + j * k;
  const uint16_t* fetch_end = fetch ? w + n * k - kAhead : w;
  const float* x0 = xs + i0 * row_floats;
  __m256 ae[C], ao[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) ae[c] = ao[c] = _mm256_setzero_ps();
  const int64_t full = k / kAvx2Chunk;
  for (int64_t ch = 0; ch < full; ++ch) {
    const uint16_t* p = row + ch * kAvx2Chunk;
    if ((ch & 1) == 0 && p < fetch_end) PrefetchLine<L>(p + kAhead);  // a line per 2 chunks
    __m256 we, wo;
    Widen<F>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), &we, &wo);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) Step(x0 + c * row_floats + ch * kAvx2Chunk, we, wo, ae[c], ao[c]);
  }
  if (const int64_t rem = k - full * kAvx2Chunk; rem > 0) {
    __m256 we, wo;
    Widen<F>(LoadTail(row + full * kAvx2Chunk, rem), &we, &wo);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      Step(x0 + c * row_floats + full * kAvx2Chunk, we, wo, ae[c], ao[c]);
    }
  }
  const float b = bias != nullptr ? bias[j] : 0.0f;
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) y[(i0 + c) * n + j] = Reduce(_mm256_add_ps(ae[c], ao[c])) + b;
}

// Weight row j against every row of x, kXRows at a time; the first group
// streams the row from memory.
template <GemvWeight F, PrefetchLevel L>
TANDEM_AVX2 inline void StreamRowAllX(const float* xs, int64_t m, const uint16_t* w, int64_t n,
                                      int64_t k, const float* bias, int64_t j, float* y) {
  const int64_t row_floats = (k + kAvx2Chunk - 1) / kAvx2Chunk * kAvx2Chunk;
  int64_t i = 0;
  for (; i + kXRows <= m; i += kXRows) {
    StreamRow<F, kXRows, L>(xs, row_floats, w, n, k, bias, j, i, i == 0, y);
  }
  // The last 1-5 rows: one call per weight row, so a pointer costs nothing.
  using Tail = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, const float*,
                        int64_t, int64_t, bool, float*);
  static constexpr Tail kTails[kXRows] = {nullptr,
                                          &StreamRow<F, 1, L>,
                                          &StreamRow<F, 2, L>,
                                          &StreamRow<F, 3, L>,
                                          &StreamRow<F, 4, L>,
                                          &StreamRow<F, 5, L>};
  if (i < m) kTails[m - i](xs, row_floats, w, n, k, bias, j, i, i == 0, y);
}

template <GemvWeight F>
TANDEM_AVX2 void RowsAvx2(const float* xs, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                          const float* bias, int64_t n0, int64_t n1, float* y) {
  const bool l2 = StreamPrefetchLevel() == PrefetchLevel::kL2;
  for (int64_t j = n0; j < n1; ++j) {
    if (l2) {
      StreamRowAllX<F, PrefetchLevel::kL2>(xs, m, w, n, k, bias, j, y);
    } else {
      StreamRowAllX<F, PrefetchLevel::kL1>(xs, m, w, n, k, bias, j, y);
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
