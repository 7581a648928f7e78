#include "cpu_worker/ops/gemv.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/gemv_avx2.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal {
namespace {

// Returns a 64-byte aligned pointer into `v`, grown (never shrunk) to hold
// `floats` floats after the alignment.
float* AlignedScratch(std::vector<float>& v, int64_t floats) {
  const size_t need = static_cast<size_t>(floats) + 16;
  if (v.size() < need) v.resize(need);
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

// ---------------------------------------------------------------------------
// Portable kernel (compiler-vectorised): one weight row at a time. Each dot
// product accumulates in 16 explicit lanes and reduces them by a fixed tree:
// an `omp simd reduction` would leave the order to the vectoriser, which may
// peel iterations by the alignment of the row, so that a row of x could sum
// differently at another offset in the batch.

constexpr int kLanes = 16;

// W is the element's storage type: float, or uint16_t for the 16-bit types.
template <GemvWeight F, typename W>
inline float WeightToF32(W v) {
  if constexpr (F == GemvWeight::kF32) {
    return v;
  } else if constexpr (F == GemvWeight::kBF16) {
    return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
  } else {
    return F16ToF32(v);
  }
}

template <GemvWeight F, typename W>
inline float DotPortable(const float* x, const W* w, int64_t k) {
  float acc[kLanes] = {};
  int64_t l = 0;
  for (; l + kLanes <= k; l += kLanes) {
    for (int t = 0; t < kLanes; ++t) acc[t] += x[l + t] * WeightToF32<F>(w[l + t]);
  }
  for (int t = 0; l + t < k; ++t) acc[t] += x[l + t] * WeightToF32<F>(w[l + t]);
  for (int s = kLanes / 2; s >= 1; s /= 2) {
    for (int t = 0; t < s; ++t) acc[t] += acc[t + s];
  }
  return acc[0];
}

template <GemvWeight F, typename W>
inline void RowsPortable(const float* x, int64_t m, const W* w, int64_t n, int64_t k,
                         const float* bias, int64_t n0, int64_t n1, float* y) {
  for (int64_t j = n0; j < n1; ++j) {
    const W* wr = w + j * k;
    const float b = bias != nullptr ? bias[j] : 0.0f;
    for (int64_t i = 0; i < m; ++i) y[i * n + j] = DotPortable<F>(x + i * k, wr, k) + b;
  }
}

__attribute__((target_clones("avx2", "default"))) void RowsPortableF32(const float* x, int64_t m,
                                                                       const float* w, int64_t n,
                                                                       int64_t k, const float* bias,
                                                                       int64_t n0, int64_t n1,
                                                                       float* y) {
  RowsPortable<GemvWeight::kF32>(x, m, w, n, k, bias, n0, n1, y);
}

__attribute__((target_clones("avx2", "default"))) void RowsPortableBf16(
    const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, const float* bias,
    int64_t n0, int64_t n1, float* y) {
  RowsPortable<GemvWeight::kBF16>(x, m, w, n, k, bias, n0, n1, y);
}

// (Only tests and CPUs without F16C reach it: Linear converts f16 weights to
// f32 at load where no AVX2 kernel reads them.)
void RowsPortableF16(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                     const float* bias, int64_t n0, int64_t n1, float* y) {
  RowsPortable<GemvWeight::kF16>(x, m, w, n, k, bias, n0, n1, y);
}

// ---------------------------------------------------------------------------
// AVX-512, f32 weights: R weight rows x C rows of x held in R * C
// accumulators, so that enough independent FMA chains are in flight; each
// weight vector is loaded once per C rows of x.

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

template <int R, int C>
TANDEM_AVX512 inline void MicroKernelF32(const float* x, const float* w, int64_t n, int64_t k,
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
      const __m512 wv = _mm512_maskz_loadu_ps(mask, w + (j0 + r) * k + l);
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

// All m rows of x against weight rows [j0, j0 + R).
template <int R>
TANDEM_AVX512 inline void RowBlockF32(const float* x, int64_t m, const float* w, int64_t n,
                                      int64_t k, const float* bias, int64_t j0, float* y) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) MicroKernelF32<R, 4>(x, w, n, k, bias, i, j0, y);
  switch (m - i) {
    case 3:
      MicroKernelF32<R, 3>(x, w, n, k, bias, i, j0, y);
      break;
    case 2:
      MicroKernelF32<R, 2>(x, w, n, k, bias, i, j0, y);
      break;
    case 1:
      MicroKernelF32<R, 1>(x, w, n, k, bias, i, j0, y);
      break;
    default:
      break;
  }
}

// One row of x against weight row j alone, the weight read as one stream
// fetched kStreamAheadBytes ahead across row ends (stream_prefetch.h; as
// StreamRow below): MicroKernelF32<1, 1>'s arithmetic, so a row's
// result is the same bits as in a batch.
template <PrefetchLevel L>
TANDEM_AVX512 inline void StreamRowF32(const float* x, const float* w, int64_t n, int64_t k,
                                       const float* bias, int64_t j, float* y) {
  constexpr int64_t kAhead = kStreamAheadBytes / sizeof(float);
  const int64_t fetch_end = n * k - kAhead;  // no fetches past the weight
  const float* row = w + j * k;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t l = 0; l < k; l += 16) {
    const __mmask16 mask =
        k - l >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (k - l)) - 1);
    if (j * k + l < fetch_end) PrefetchLine<L>(row + l + kAhead);
    const __m512 wv = _mm512_maskz_loadu_ps(mask, row + l);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + l), wv, acc);
  }
  y[j] = _mm512_reduce_add_ps(acc) + (bias != nullptr ? bias[j] : 0.0f);
}

TANDEM_AVX512 void RowsAvx512F32(const float* x, int64_t m, const float* w, int64_t n, int64_t k,
                                 const float* bias, int64_t n0, int64_t n1, float* y) {
  int64_t j = n0;
  if (m == 1) {
    if (StreamPrefetchLevel() == PrefetchLevel::kL2) {
      for (; j < n1; ++j) StreamRowF32<PrefetchLevel::kL2>(x, w, n, k, bias, j, y);
    } else {
      for (; j < n1; ++j) StreamRowF32<PrefetchLevel::kL1>(x, w, n, k, bias, j, y);
    }
    return;
  }
  for (; j + 4 <= n1; j += 4) RowBlockF32<4>(x, m, w, n, k, bias, j, y);
  for (; j < n1; ++j) RowBlockF32<1>(x, m, w, n, k, bias, j, y);
}

// ---------------------------------------------------------------------------
// AVX-512, bf16 and f16 weights (F). A 64-byte load holds 32 weights. For
// bf16, shifting each dword left by 16 gives the even elements as f32,
// masking off its low half the odd ones (exact, two instructions per 32
// weights); for f16, vcvtph2ps widens each 32-byte half (exact: every f16
// is an f32). x is regrouped to match once per call (SplitChunk: evens and
// odds, or the two halves as they are). Every output element is then
// accumulated by Step over its 32-element chunks in order, in 16 lanes, and
// finished by Finish: the direct and the blocked paths below differ only in
// where the operands wait between steps (registers or an L1 buffer), not in
// the arithmetic, so a row's result does not depend on m.

constexpr int64_t kChunk = 32;           // k elements per step
constexpr int64_t kDirectMaxRows = 4;    // larger m takes the blocked path
constexpr int64_t kDirectItemRows = 32;  // weight rows per parallel item (direct)
constexpr int64_t kGroupRows = 16;       // weight rows per parallel item (blocked)
constexpr int64_t kBlockChunks = 16;     // k block of the blocked path: 512 elements
constexpr int kBlockTileRows = 4;        // weight rows widened together (blocked)

TANDEM_AVX512 inline __mmask32 ChunkMask(int64_t k, int64_t l) {
  return k - l >= kChunk ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (k - l)) - 1);
}

// The chunk's 32 weights as two f32 vectors: for bf16 the even and the odd
// elements, for f16 the first 16 and the last 16 (zero past the mask).
template <GemvWeight F>
TANDEM_AVX512 inline void Widen(const uint16_t* p, __mmask32 mask, __m512* even, __m512* odd) {
  const __m512i v = _mm512_maskz_loadu_epi16(mask, p);
  if constexpr (F == GemvWeight::kBF16) {
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *odd = _mm512_castsi512_ps(
        _mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  } else {
    *even = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
    *odd = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
  }
}

// acc += x_even * w_even, then += x_odd * w_odd (for f16, the first and
// the last 16 elements): the one accumulation step.
TANDEM_AVX512 inline __m512 Step(__m512 acc, __m512 xe, __m512 xo, __m512 we, __m512 wo) {
  return _mm512_fmadd_ps(xo, wo, _mm512_fmadd_ps(xe, we, acc));
}

TANDEM_AVX512 inline float Finish(__m512 acc, const float* bias, int64_t j) {
  return _mm512_reduce_add_ps(acc) + (bias != nullptr ? bias[j] : 0.0f);
}

// Chunk c of row i of x goes to xs + (c * m + i) * 32: for bf16 its 16
// even elements, then its 16 odd ones, for f16 its elements in order; zero
// past k. Chunk-major, so that the rows one step of a tile reads are
// adjacent lines (rows of a row-major x lie a power of two apart for the
// usual k and would share L1 sets).
template <GemvWeight F>
TANDEM_AVX512 void SplitChunk(const float* x, int64_t m, int64_t k, int64_t c, float* xs) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const int64_t l = c * kChunk;
  const int64_t rem = k - l;
  const auto mask16 = [](int64_t r) {
    return r >= 16 ? static_cast<__mmask16>(0xffff)
                   : static_cast<__mmask16>(r > 0 ? (1u << r) - 1 : 0);
  };
  const __mmask16 lo = mask16(rem), hi = mask16(rem - 16);
  for (int64_t i = 0; i < m; ++i) {
    const __m512 a = _mm512_maskz_loadu_ps(lo, x + i * k + l);
    const __m512 b = _mm512_maskz_loadu_ps(hi, x + i * k + l + 16);
    float* dst = xs + (c * m + i) * kChunk;
    if constexpr (F == GemvWeight::kBF16) {
      _mm512_store_ps(dst, _mm512_permutex2var_ps(a, even, b));
      _mm512_store_ps(dst + 16, _mm512_permutex2var_ps(a, odd, b));
    } else {
      _mm512_store_ps(dst, a);
      _mm512_store_ps(dst + 16, b);
    }
  }
}

// Direct path: R weight rows x C rows of x in registers over all of k,
// the weights widened in registers as they stream in. For a few rows of x.
// Software prefetch into level L (stream_prefetch.h). Rows of 4 KiB and
// more fetch 1 KiB ahead in the same row: that made a cold pass ~15% faster
// than none on an Emerald Rapids VM. Shorter rows fetch the same bytes a
// whole number of tiles ahead (about kAheadBytes): at k = 1024 (2 KiB rows:
// MoE experts' gate/up, a 1024-wide LM head) half of the in-row fetches fell
// in lines the tile was already reading and the next tile's rows started
// cold, so such matrices read at 20-25 GB/s against 28-35 for k = 2816.
// With tiles ahead the MoE benchmark's sequence of m = 1 linears (hidden
// 1024, ffn 2816) read 25-32 GB/s against 23-25 on a Zen 4 VM; for 8 KiB
// rows (BM_Linear) tiles ahead measured no better than in-row, within the
// VM's noise, so long rows keep the in-row fetch (docs/PERFORMANCE.md).
constexpr int64_t kInRowMinBytes = 4096;
constexpr int64_t kInRowAhead = 512;  // elements: 1 KiB
constexpr int64_t kAheadBytes = 128 << 10;

template <GemvWeight F, int R, int C, PrefetchLevel L>
TANDEM_AVX512 inline void DirectTile(const float* xs, int64_t m, const uint16_t* w, int64_t n,
                                         int64_t k, const float* bias, int64_t i0, int64_t j0,
                                         float* y) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(uint16_t));
  const bool in_row = row_bytes >= kInRowMinBytes;
  const int64_t ahead_rows = R * ((kAheadBytes + R * row_bytes - 1) / (R * row_bytes));
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const __mmask32 mask = ChunkMask(k, ch * kChunk);
    __m512 we[R], wo[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint16_t* p = w + (j0 + r) * k + ch * kChunk;
      if (in_row) {
        PrefetchLine<L>(p + kInRowAhead);
      } else if (j0 + ahead_rows + r < n) {
        PrefetchLine<L>(p + ahead_rows * k);
      }
      Widen<F>(p, mask, &we[r], &wo[r]);
    }
    const float* xc = xs + (ch * m + i0) * kChunk;
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m512 xe = _mm512_load_ps(xc + c * kChunk);
      const __m512 xo = _mm512_load_ps(xc + c * kChunk + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = Step(acc[r][c], xe, xo, we[r], wo[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) y[(i0 + c) * n + j0 + r] = Finish(acc[r][c], bias, j0 + r);
  }
}

template <GemvWeight F, int R, PrefetchLevel L>
TANDEM_AVX512 inline void DirectRows(const float* xs, int64_t m, const uint16_t* w, int64_t n,
                                         int64_t k, const float* bias, int64_t j0, float* y) {
  switch (m) {
    case 4:
      DirectTile<F, R, 4, L>(xs, m, w, n, k, bias, 0, j0, y);
      break;
    case 3:
      DirectTile<F, R, 3, L>(xs, m, w, n, k, bias, 0, j0, y);
      break;
    case 2:
      DirectTile<F, R, 2, L>(xs, m, w, n, k, bias, 0, j0, y);
      break;
    default:
      DirectTile<F, R, 1, L>(xs, m, w, n, k, bias, 0, j0, y);
      break;
  }
}

// One row of x: each weight row alone, read as one stream with the rows
// after it (stream_prefetch.h). On the AMD EPYC VM a loop of this
// arithmetic read 44-50 GB/s a row at a time against 32-34 eight rows at a
// time (as this path did before; a read sweep 40-50), the same minutes.
// One row's chain (two dependent FMAs per 64 bytes) still runs ~110 GB/s
// from cache on two cores, well above DRAM. Without the software prefetch
// the loop read 19 GB/s; 1, 2, 4 and 8 KiB ahead read 0.78-0.85,
// 0.89-1.06, 0.70-0.87 and 0.82-0.84 of the sweep beside it. The
// arithmetic is DirectTile<F, 1, 1>'s, so a row's result is the same bits
// as in a batch.
constexpr int64_t kStreamAhead = kStreamAheadBytes / sizeof(uint16_t);  // elements

template <GemvWeight F, PrefetchLevel L>
TANDEM_AVX512 inline void StreamRow(const float* xs, const uint16_t* w, int64_t n, int64_t k,
                                        const float* bias, int64_t j, float* y) {
  const uint16_t* row = w + j * k;
  const int64_t fetch_end = n * k - kStreamAhead;  // no fetches past the weight
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const uint16_t* p = row + ch * kChunk;
    if (j * k + ch * kChunk < fetch_end) PrefetchLine<L>(p + kStreamAhead);
    __m512 we, wo;
    Widen<F>(p, ChunkMask(k, ch * kChunk), &we, &wo);
    const float* xc = xs + ch * kChunk;
    acc = Step(acc, _mm512_load_ps(xc), _mm512_load_ps(xc + 16), we, wo);
  }
  y[j] = Finish(acc, bias, j);
}

template <GemvWeight F, PrefetchLevel L>
TANDEM_AVX512 void DirectItem(const float* xs, int64_t m, const uint16_t* w, int64_t n,
                                  int64_t k, const float* bias, int64_t n0, int64_t n1, float* y) {
  int64_t j = n0;
  if (m == 1) {
    for (; j < n1; ++j) StreamRow<F, L>(xs, w, n, k, bias, j, y);
    return;
  }
  for (; j + 4 <= n1; j += 4) DirectRows<F, 4, L>(xs, m, w, n, k, bias, j, y);
  for (; j < n1; ++j) DirectRows<F, 1, L>(xs, m, w, n, k, bias, j, y);
}

// Blocked path, for more rows of x: the direct path would stream all of x
// (8 KiB per row at k = 2048) from L2 once per four weight rows and widen
// every weight once per four rows of x, which left it at half the FMA
// rate. Here a group of kGroupRows weight rows is walked in k blocks of
// kBlockChunks chunks: a block of x (m x 2 KiB) stays in L1 for the whole
// group, each tile of weight rows is widened once per block into `wb`, and
// the accumulators wait in `accs` between blocks (stored and reloaded
// unchanged, so the sums are those of the direct path).
struct BlockScratch {
  float* wb;    // [kBlockChunks][kBlockTileRows][32]: the widened weights
  float* accs;  // [kGroupRows][m][16]: the accumulators between k blocks
};

template <GemvWeight F, int R>
TANDEM_AVX512 inline void WidenBlock(const uint16_t* w, int64_t k, int64_t j, int64_t c0,
                                     int64_t nc, const uint16_t* prefetch, float* wb) {
  for (int64_t ch = 0; ch < nc; ++ch) {
    const int64_t l = (c0 + ch) * kChunk;
    const __mmask32 mask = ChunkMask(k, l);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (prefetch != nullptr) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + r * k + ch * kChunk), _MM_HINT_T1);
      }
      __m512 we, wo;
      Widen<F>(w + (j + r) * k + l, mask, &we, &wo);
      _mm512_store_ps(wb + (ch * R + r) * kChunk, we);
      _mm512_store_ps(wb + (ch * R + r) * kChunk + 16, wo);
    }
  }
}

// Rows [i0, i0 + C) of x against the R widened rows in `wb` (group rows
// [jr, jr + R)), chunks [c0, c0 + nc).
template <int R, int C>
TANDEM_AVX512 inline void BlockTile(const float* xs, int64_t m, const BlockScratch& s,
                                        int64_t c0, int64_t nc, bool first, bool last, int64_t i0,
                                        int64_t jr, int64_t j0, int64_t n, const float* bias,
                                        float* y) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      acc[r][c] =
          first ? _mm512_setzero_ps() : _mm512_load_ps(s.accs + ((jr + r) * m + i0 + c) * 16);
    }
  }
  for (int64_t ch = 0; ch < nc; ++ch) {
    __m512 we[R], wo[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      we[r] = _mm512_load_ps(s.wb + (ch * R + r) * kChunk);
      wo[r] = _mm512_load_ps(s.wb + (ch * R + r) * kChunk + 16);
    }
    const float* xc = xs + ((c0 + ch) * m + i0) * kChunk;
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m512 xe = _mm512_load_ps(xc + c * kChunk);
      const __m512 xo = _mm512_load_ps(xc + c * kChunk + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = Step(acc[r][c], xe, xo, we[r], wo[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      if (last) {
        y[(i0 + c) * n + j0 + jr + r] = Finish(acc[r][c], bias, j0 + jr + r);
      } else {
        _mm512_store_ps(s.accs + ((jr + r) * m + i0 + c) * 16, acc[r][c]);
      }
    }
  }
}

template <int R>
TANDEM_AVX512 inline void BlockTiles(const float* xs, int64_t m, const BlockScratch& s,
                                         int64_t c0, int64_t nc, bool first, bool last, int64_t jr,
                                         int64_t j0, int64_t n, const float* bias, float* y) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    BlockTile<R, 4>(xs, m, s, c0, nc, first, last, i, jr, j0, n, bias, y);
  switch (m - i) {
    case 3:
      BlockTile<R, 3>(xs, m, s, c0, nc, first, last, i, jr, j0, n, bias, y);
      break;
    case 2:
      BlockTile<R, 2>(xs, m, s, c0, nc, first, last, i, jr, j0, n, bias, y);
      break;
    case 1:
      BlockTile<R, 1>(xs, m, s, c0, nc, first, last, i, jr, j0, n, bias, y);
      break;
    default:
      break;
  }
}

// Weight rows [j0, j0 + g), g <= kGroupRows.
template <GemvWeight F>
TANDEM_AVX512 void BlockItem(const float* xs, int64_t m, const uint16_t* w, int64_t n,
                                 int64_t k, const float* bias, int64_t j0, int64_t g,
                                 const BlockScratch& s, float* y) {
  constexpr int R = kBlockTileRows;
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  for (int64_t c0 = 0; c0 < chunks; c0 += kBlockChunks) {
    const int64_t nc = std::min(kBlockChunks, chunks - c0);
    const bool first = c0 == 0, last = c0 + nc == chunks;
    int64_t jr = 0;
    for (; jr + R <= g; jr += R) {
      // While this block computes, fetch what these rows read next: their
      // next block, or the next group's first (else DRAM idles while the
      // widened block is reused from L1).
      const uint16_t* next = nullptr;
      if (!last) {
        next = w + (j0 + jr) * k + (c0 + nc) * kChunk;
      } else if (j0 + kGroupRows + jr + R <= n) {
        next = w + (j0 + kGroupRows + jr) * k;
      }
      WidenBlock<F, R>(w, k, j0 + jr, c0, nc, next, s.wb);
      BlockTiles<R>(xs, m, s, c0, nc, first, last, jr, j0, n, bias, y);
    }
    for (; jr < g; ++jr) {
      WidenBlock<F, 1>(w, k, j0 + jr, c0, nc, nullptr, s.wb);
      BlockTiles<1>(xs, m, s, c0, nc, first, last, jr, j0, n, bias, y);
    }
  }
}

template <GemvWeight F>
void LinearAvx512Half(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                      const float* bias, float* y, bool parallel) {
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  // The calling thread's; read by all the team.
  thread_local std::vector<float> split;
  float* xs = AlignedScratch(split, chunks * m * kChunk);
  const bool blocked = m > kDirectMaxRows;
  const int64_t item_rows =
      blocked ? kGroupRows
              : (m == 1 ? StreamItemRows(n, 2 * k, kDirectItemRows, parallel) : kDirectItemRows);
  const int64_t items = (n + item_rows - 1) / item_rows;
  const bool l2 = StreamPrefetchLevel() == PrefetchLevel::kL2;
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) SplitChunk<F>(x, m, k, c, xs);
    // (The implicit barrier: every chunk is split before any tile reads.)
    BlockScratch s{nullptr, nullptr};
    if (blocked) {
      thread_local std::vector<float> scratch;  // this worker's
      s.wb = AlignedScratch(scratch, kBlockChunks * kBlockTileRows * kChunk + kGroupRows * m * 16);
      s.accs = s.wb + kBlockChunks * kBlockTileRows * kChunk;
    }
    if (blocked) {
      // Static: each thread's next group is the one BlockItem prefetches.
#pragma omp for schedule(static)
      for (int64_t b = 0; b < items; ++b) {
        const int64_t n0 = b * kGroupRows;
        BlockItem<F>(xs, m, w, n, k, bias, n0, std::min(n, n0 + kGroupRows) - n0, s, y);
      }
    } else {
      // Dynamic: on a shared machine a thread that loses a time slice would
      // otherwise hold the whole team at the barrier while the memory idles.
      // Each output is still one item's, so the sums do not depend on it.
#pragma omp for schedule(dynamic)
      for (int64_t b = 0; b < items; ++b) {
        const int64_t n0 = b * item_rows;
        const int64_t n1 = std::min(n, n0 + item_rows);
        if (l2) {
          DirectItem<F, PrefetchLevel::kL2>(xs, m, w, n, k, bias, n0, n1, y);
        } else {
          DirectItem<F, PrefetchLevel::kL1>(xs, m, w, n, k, bias, n0, n1, y);
        }
      }
    }
  }
}

bool UseAvx512() { return MaxKernelIsa() >= KernelIsa::kAvx512; }

// bf16 and f16 weights on AVX2 (gemv_avx2.h): x regrouped once by the
// calling thread, then blocks of weight rows over the threads.
void LinearAvx2Half(const float* x, int64_t m, const uint16_t* w, GemvWeight wt, int64_t n,
                    int64_t k, const float* bias, float* y, bool parallel) {
  thread_local std::vector<float> split;  // the calling thread's; read by all the team
  float* xs = AlignedScratch(split, SplitXAvx2Floats(m, k));
  SplitXAvx2(x, m, k, wt, xs);
  // As the portable kernel's blocks: enough to balance the threads.
  constexpr int64_t kBlock = 32;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * kBlock;
    RowsAvx2Half(xs, m, w, wt, n, k, bias, n0, std::min(n, n0 + kBlock), y);
  }
}

}  // namespace

void SmallBatchLinear(const float* x, int64_t m, const void* w, GemvWeight wt, int64_t n,
                      int64_t k, const float* bias, float* y, bool allow_avx512) {
  TANDEM_CHECK(m >= 0 && n > 0 && k > 0);
  if (m == 0) return;
  const bool avx512 = allow_avx512 && UseAvx512();
  const bool parallel = n * k * m > (1 << 15);
  const bool half = wt != GemvWeight::kF32;
  const auto* wh = static_cast<const uint16_t*>(w);
  if (wt == GemvWeight::kBF16 && avx512) {
    LinearAvx512Half<GemvWeight::kBF16>(x, m, wh, n, k, bias, y, parallel);
    return;
  }
  if (wt == GemvWeight::kF16 && avx512) {
    LinearAvx512Half<GemvWeight::kF16>(x, m, wh, n, k, bias, y, parallel);
    return;
  }
  if (half && allow_avx512 && MaxKernelIsa() >= KernelIsa::kAvx2) {
    LinearAvx2Half(x, m, wh, wt, n, k, bias, y, parallel);
    return;
  }
  // Blocks of weight rows: small enough to balance threads, large enough to
  // keep the per-block overhead negligible.
  // One row of x on f32 weights streams them (stream_prefetch.h).
  constexpr int64_t kRows = 32;
  const int64_t block = m == 1 && !half && avx512
                            ? StreamItemRows(n, k * static_cast<int64_t>(sizeof(float)), kRows,
                                             parallel)
                            : kRows;
  const int64_t blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * block;
    const int64_t n1 = std::min(n, n0 + block);
    if (wt == GemvWeight::kBF16) {
      RowsPortableBf16(x, m, wh, n, k, bias, n0, n1, y);
    } else if (wt == GemvWeight::kF16) {
      RowsPortableF16(x, m, wh, n, k, bias, n0, n1, y);
    } else if (avx512) {
      RowsAvx512F32(x, m, static_cast<const float*>(w), n, k, bias, n0, n1, y);
    } else {
      RowsPortableF32(x, m, static_cast<const float*>(w), n, k, bias, n0, n1, y);
    }
  }
}

}  // namespace tandem::ops::internal
