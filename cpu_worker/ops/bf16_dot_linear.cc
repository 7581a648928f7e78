#include "cpu_worker/ops/bf16_dot_linear.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"

namespace tandem::ops::internal {
namespace {

// Weight rows per tile (streams read side by side) and activation rows per
// pass over a tile: kRows x kCols accumulators, kCols weight vectors and one
// activation vector take 29 of the 32 vector registers.
constexpr int kCols = 4;
constexpr int kRows = 6;
// Weight rows per OpenMP work item: a few tiles, so that n splits evenly
// over the threads and each thread streams a contiguous range.
constexpr int64_t kColsPerItem = 16;

// The stored weight rows of a later work item, fetched into L2 while this
// item computes: a work item's rows are one contiguous run (bf16 or GGUF
// blocks), and each k-step of every tile pass fetches `lines` lines of it,
// so that the fetches spread evenly over the item's passes. On a Zen 4 VM
// (2 threads, 4096 x 4096, 16 rows) the hardware prefetcher alone left the
// pass at 210-240 GFLOP/s from DRAM against 370 with the weight in L3: the
// cores waited on memory. Fetched this way it ran at 240-270, and 270-280 on
// 2 MiB pages (docs/PERFORMANCE.md). `p` is null where there is nothing
// further on.
struct RowPrefetch {
  const char* p = nullptr;
  const char* end = nullptr;
  int lines = 0;  // per k-step
};
// How far ahead, in work items (256 KiB of bf16 at k = 4096): 2 and 4
// measured the same, 1 and 8 7-9% slower; into L1 or past the caches
// (prefetchnta) 18-25% slower than into L2.
constexpr int64_t kPrefetchItems = 2;

// Fetches the next `pf.lines` lines, if any are left.
inline void PrefetchStep(RowPrefetch& pf) {
  if (pf.p == nullptr) return;
  for (int i = 0; i < pf.lines && pf.p < pf.end; ++i, pf.p += 64) {
    _mm_prefetch(pf.p, _MM_HINT_T1);
  }
}

#define TANDEM_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Adds, for R rows of x (blocked bf16 as Bf16BlockRows writes it, `m` rows
// in all; `x` at the group's first row) and C rows of w, the products over
// elements [l0, l1) to the accumulators at `acc` (R x C vectors; zeroed
// first if `first`), in 32-element steps, a step past k masked on the
// weight side (x is zero-padded). The loops over r and c are unrolled so
// that the accumulators stay in registers within the span.
template <int R, int C>
TANDEM_BF16_TARGET void TileSpan(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k,
                                 int64_t l0, int64_t l1, bool first, __m512* acc_mem,
                                 RowPrefetch& pf) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      acc[r][c] = first ? _mm512_setzero_ps() : _mm512_load_ps(&acc_mem[r * C + c]);
    }
  }
  int64_t l = l0;
  const uint16_t* xs = x + l0 / 32 * m * 32;
  for (; l + 32 <= l1; l += 32, xs += m * 32) {
    __m512bh wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) wv[c] = (__m512bh)_mm512_loadu_si512(w + c * k + l);
    PrefetchStep(pf);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xs + r * 32);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
    }
  }
  if (l < l1) {
    // Zeros past k on both sides: a pair that straddles the end adds 0.
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (l1 - l)) - 1);
    __m512bh wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) wv[c] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + c * k + l);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xs + r * 32);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm512_store_ps(&acc_mem[r * C + c], acc[r][c]);
  }
}

// y[r, c] = the sum of accumulator (r, c) + bias[c], for m rows and C columns.
template <int C>
TANDEM_BF16_TARGET void Reduce(const __m512* acc_mem, int64_t m, int64_t n, const float* bias,
                               float* y) {
  for (int64_t r = 0; r < m; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      float v = _mm512_reduce_add_ps(_mm512_load_ps(&acc_mem[r * C + c]));
      if (bias != nullptr) v += bias[c];
      y[r * n + c] = v;
    }
  }
}

// Elements of k per span: every row group passes over a span of the C
// weight rows before the next span, so that the weights come from DRAM at
// an even rate (once per span, while all groups compute on them from L1)
// rather than in bursts in the first group's pass over the whole of k,
// with the other groups' passes reading nothing new. The accumulators wait
// in memory between spans. On a Zen 4 VM (4096 x 4096, cold, 2 MiB pages,
// 2 threads) 512-element spans took 16 rows from 275-285 to 297-311
// GFLOP/s and 24 rows from 311-330 to 324-346; 256 and, at 32 rows, spans
// at all were slower (32 rows: 322-338 against 343-358 over the whole of
// k, as the 32 rows' span of x no longer leaves L1 room for the weights).
// Since each span of x runs against every tile of a work item before the
// next span (Item), on a faster AMD VM (oneDNN bf16 GEMM 720-900 GFLOP/s,
// 4096 x 4096 cold, 2 threads) 16 rows went from 286-314 to 345-358
// GFLOP/s and 24 rows from 351-386 to 404-468; 32 rows with spans of 256,
// 512 or 1024 measured the same as without. GGUF rows dequantized to bf16
// take the same spans now (they measured slower in the old order): Q8_0
// at 4096 x 4096 cold, 12 rows 238-240 -> 305-344 GFLOP/s, 16 rows
// 263-272 -> 317-332.
constexpr int64_t kSpan = 512;
constexpr int64_t kSpanMaxRows = 24;

// Elements [l0, l1) of all m rows against C weight rows, kRows rows at a
// time (row i's blocks start at x + i * 32); the accumulators at `acc` (m x
// C vectors) are zeroed first if `first`.
template <int C>
void Groups(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k, int64_t l0, int64_t l1,
            bool first, __m512* acc, RowPrefetch& pf) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) {
    TileSpan<kRows, C>(x + i * 32, m, w, k, l0, l1, first, acc + i * C, pf);
  }
  const uint16_t* xr = x + i * 32;
  __m512* ar = acc + i * C;
  switch (m - i) {
    case 1: TileSpan<1, C>(xr, m, w, k, l0, l1, first, ar, pf); break;
    case 2: TileSpan<2, C>(xr, m, w, k, l0, l1, first, ar, pf); break;
    case 3: TileSpan<3, C>(xr, m, w, k, l0, l1, first, ar, pf); break;
    case 4: TileSpan<4, C>(xr, m, w, k, l0, l1, first, ar, pf); break;
    case 5: TileSpan<5, C>(xr, m, w, k, l0, l1, first, ar, pf); break;
    default: break;
  }
}

// Groups<C> for the C = cols (1..kCols) weight rows of one tile.
void TileGroups(int cols, const uint16_t* x, int64_t m, const uint16_t* w, int64_t k, int64_t l0,
                int64_t l1, bool first, __m512* acc, RowPrefetch& pf) {
  switch (cols) {
    case 1: Groups<1>(x, m, w, k, l0, l1, first, acc, pf); break;
    case 2: Groups<2>(x, m, w, k, l0, l1, first, acc, pf); break;
    case 3: Groups<3>(x, m, w, k, l0, l1, first, acc, pf); break;
    default: Groups<kCols>(x, m, w, k, l0, l1, first, acc, pf); break;
  }
}

void TileReduce(int cols, const __m512* acc, int64_t m, int64_t n, const float* bias, float* y) {
  switch (cols) {
    case 1: Reduce<1>(acc, m, n, bias, y); break;
    case 2: Reduce<2>(acc, m, n, bias, y); break;
    case 3: Reduce<3>(acc, m, n, bias, y); break;
    default: Reduce<kCols>(acc, m, n, bias, y); break;
  }
}

// Output columns [j0, end) of all m rows; `w` holds weight row j0 onwards
// in bf16. `ahead` (null if there is none) is the stored form of a later
// item's rows, `ahead_bytes` long. With spans shorter than k, each span of
// x is run against every tile of the item before the next span, so that it
// is read from L2 once per item rather than once per tile: with 16 rows of
// x at k = 4096, x is 128 KiB, past L1, and the old order (every span of a
// tile, then the next tile) re-read all of it from L2 for each tile of four
// weight rows, 40 bytes of L2 a cycle at the dot products' full rate.
void Item(const uint16_t* xp, int64_t m, const uint16_t* w, int64_t j0, int64_t end, int64_t k,
          int64_t n, const float* bias, float* y, const void* ahead, int64_t ahead_bytes,
          int64_t span) {
  RowPrefetch pf;
  if (ahead != nullptr) {
    const int64_t passes = (end - j0 + kCols - 1) / kCols * ((m + kRows - 1) / kRows);
    const int64_t steps = passes * ((k + 31) / 32);
    pf.p = static_cast<const char*>(ahead);
    pf.end = pf.p + ahead_bytes;
    pf.lines = static_cast<int>((ahead_bytes / 64 + steps - 1) / steps);
  }
  // m x kCols vectors per tile, 64-byte aligned.
  const int64_t tiles = (end - j0 + kCols - 1) / kCols;
  thread_local std::vector<float> acc_buf;
  const size_t floats = static_cast<size_t>(tiles * m * kCols * 16 + 16);
  if (acc_buf.size() < floats) acc_buf.resize(floats);
  auto* acc = reinterpret_cast<__m512*>((reinterpret_cast<uintptr_t>(acc_buf.data()) + 63) &
                                        ~uintptr_t{63});
  for (int64_t l0 = 0; l0 < k; l0 += span) {
    const int64_t l1 = std::min(k, l0 + span);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t j = j0 + t * kCols;
      TileGroups(static_cast<int>(std::min<int64_t>(kCols, end - j)), xp, m, w + (j - j0) * k, k,
                 l0, l1, l0 == 0, acc + t * m * kCols, pf);
    }
  }
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t j = j0 + t * kCols;
    TileReduce(static_cast<int>(std::min<int64_t>(kCols, end - j)), acc + t * m * kCols, m, n,
               bias != nullptr ? bias + j : nullptr, y + j);
  }
}

// The rows of work item `it` + kPrefetchItems, of `row_bytes` each, or null.
const void* RowsAhead(const void* w, int64_t row_bytes, int64_t it, int64_t n, int64_t* bytes) {
  const int64_t first = (it + kPrefetchItems) * kColsPerItem;
  if (first >= n) return nullptr;
  *bytes = (std::min(n, first + kColsPerItem) - first) * row_bytes;
  return static_cast<const uint8_t*>(w) + first * row_bytes;
}

}  // namespace

// Interleaved by row so that a tile reads its rows' activations for one
// step as one contiguous run, instead of R streams k elements apart that
// would share the same L1 sets (k = 4096: 8 KiB apart).
TANDEM_BF16_TARGET void Bf16BlockRows(const float* x, int64_t m, int64_t k, int64_t r0, int64_t r1,
                                      uint16_t* dst) {
  const int64_t blocks = (k + 31) / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = x + r * k;
    for (int64_t b = 0; b < blocks; ++b) {
      uint16_t* out = dst + (b * m + r) * 32;
      for (int h = 0; h < 2; ++h) {
        const int64_t at = b * 32 + h * 16;
        const int64_t left = std::clamp<int64_t>(k - at, 0, 16);
        const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1);
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + at));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + h * 16),
                            reinterpret_cast<const __m256i&>(v));
      }
    }
  }
}

const uint16_t* Bf16XBlocks(const float* x, int64_t m, int64_t k) {
  thread_local std::vector<uint16_t> xb;
  const int64_t padded = m * ((k + 31) / 32 * 32);
  if (static_cast<int64_t>(xb.size()) < padded) xb.resize(static_cast<size_t>(padded));
  Bf16BlockRows(x, m, k, 0, m, xb.data());
  return xb.data();
}

bool Bf16DotKernelRuns() { return CpuHasBf16(); }

void Bf16DotLinear(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                   const float* bias, float* y) {
  const uint16_t* xp = Bf16XBlocks(x, m, k);
  const int64_t items = (n + kColsPerItem - 1) / kColsPerItem;
  const int64_t span = m <= kSpanMaxRows ? kSpan : k;
#pragma omp parallel for schedule(static) if (items > 1 && n * k > 65536)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t j0 = it * kColsPerItem;
    int64_t ahead_bytes = 0;
    const void* ahead = RowsAhead(w, 2 * k, it, n, &ahead_bytes);
    Item(xp, m, w + j0 * k, j0, std::min(n, j0 + kColsPerItem), k, n, bias, y, ahead, ahead_bytes,
         span);
  }
}

void QuantDotLinear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                    const float* bias, float* y) {
  TANDEM_CHECK(DTypeIsQuantized(t) && k % 32 == 0);
  const uint16_t* xp = Bf16XBlocks(x, m, k);
  const int64_t row_bytes = k / 32 * DTypeBlockBytes(t);
  const auto* blocks = static_cast<const uint8_t*>(w);
  const int64_t items = (n + kColsPerItem - 1) / kColsPerItem;
  const int64_t span = m <= kSpanMaxRows ? kSpan : k;
#pragma omp parallel for schedule(static) if (items > 1 && n * k > 65536)
  for (int64_t it = 0; it < items; ++it) {
    // This worker's rows in bf16: kColsPerItem x k (128 KiB at k = 4096,
    // in L2 while every tile pass re-reads them).
    thread_local std::vector<uint16_t> rows;
    if (static_cast<int64_t>(rows.size()) < kColsPerItem * k) {
      rows.resize(static_cast<size_t>(kColsPerItem * k));
    }
    const int64_t j0 = it * kColsPerItem;
    const int64_t end = std::min(n, j0 + kColsPerItem);
    quant::DequantRowsBf16Avx512(t, blocks + j0 * row_bytes, row_bytes, end - j0, k, rows.data());
    int64_t ahead_bytes = 0;
    const void* ahead = RowsAhead(blocks, row_bytes, it, n, &ahead_bytes);
    Item(xp, m, rows.data(), j0, end, k, n, bias, y, ahead, ahead_bytes, span);
  }
}

}  // namespace tandem::ops::internal
