// Flash-decoding on the CPU: attention of sequences that each decode one
// token, bound by reading their keys and values once.
//
// A work item is (sequence, chunk of its context). It walks the chunk's
// blocks a tile of tokens at a time and, per kv head, reads each K and V row
// once for all the query heads of that head's group, keeping per query head
// an online softmax: the running maximum m, the running sum
// l = sum_j exp(s_j - m) and the accumulator acc = sum_j exp(s_j - m) v_j,
// both rescaled by exp(m_old - m_new) when m grows. Chunks let the threads
// share one long sequence; a merge step then combines the chunks' (m, l,
// acc) of each query head into out = acc / l.
//
// Within an item the kernel goes tile by tile (up to a block's tokens) and
// kv head by kv head within a tile, prefetching the slice the next call
// will read while it reads its own (see PrefetchRow): a block stores each
// kv head's rows together, so a slice is one contiguous run of memory, the
// reads stay within one block and the next slice's address is known.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/status_macros.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/vec_math.h"

namespace tandem::ops {
namespace {

// Tokens per tile (at most): the kernels' score buffers hold this many.
constexpr int64_t kMaxTile = 32;
// Query heads per AVX-512 kernel call: their dot products and accumulators
// stay in registers. Larger groups run in slices (the tile is in L1 by then).
constexpr int kMaxGroup = 8;
// Smallest chunk cut for threads (tokens): shorter ones would spend more on
// the merge and the item than they gain.
constexpr int64_t kMinChunk = 64;
// Chunks a long context is cut into. A sequence's chunks depend on its own
// length only — not on the thread count or on the other sequences of the
// call — so its result is the same bits however it is batched (the chunks'
// states are merged in chunk order). 16 chunks give 2-16 threads enough
// items for dynamic scheduling to even out threads slowed or woken late by
// others on the machine; a single long sequence uses at most 16 threads.
constexpr int64_t kChunksPerSequence = 16;

// The chunk length for a context of `len` keys: at least kMinChunk, about
// len / kChunksPerSequence, a whole number of KV blocks.
int64_t DecodeChunk(int64_t len, int64_t block_size) {
  const int64_t chunk =
      std::max(kMinChunk, (len + kChunksPerSequence - 1) / kChunksPerSequence);
  return (chunk + block_size - 1) / block_size * block_size;
}
// Least K/V bytes worth a parallel region: with OMP_WAIT_POLICY=PASSIVE
// (what tandem sets) waking the team costs ~10 us on the development VM,
// what two threads save on ~256 KiB at ~25 GB/s.
constexpr int64_t kMinParallelBytes = int64_t{256} << 10;

// A query head's online-softmax state within an item: acc [head_dim], then
// m and l. Heads lie `sd` floats apart (a multiple of 16, so each acc starts
// on a cache line).
inline int64_t StateStride(int64_t head_dim) { return (head_dim + 2 + 15) / 16 * 16; }

// The kernels prefetch the rows the next call reads (`next_k`/`next_v`,
// `next_count` of them) while they read their own, a cache line for a
// line: the memory then stays busy through the computation instead of
// waiting for each tile's loads in turn (a core keeps only so many misses in
// flight, and the sums take a good part of a tile's read time: ~22 GB/s
// from L2 against ~11 from DRAM per core at GQA 4). The hint is prefetcht2
// (to L2): the next call is a few microseconds away, and on the development
// VM it read 2-5% faster than prefetcht0 in tandem_ops_bench's
// BM_AttendDecode (1 GiB of KV, 2 threads, mean of 4 interleaved runs).
// One thread, AVX-512: 7.5 GB/s without prefetching, 11.5 with.
inline void Prefetch(const float* p) { __builtin_prefetch(p, 0, 1); }  // prefetcht2
inline void PrefetchRow(const float* p, int64_t hd) {
  for (int64_t d = 0; d < hd; d += 16) Prefetch(p + d);
}

// ---------------------------------------------------------------------------
// Portable kernel (compiler-vectorised): one query head at a time; the
// tile's K and V rows come from L1 after the first head.
//
// q [group, hd]; k and v point at the tile's first token's kv-head slice,
// `stride` floats between tokens; `count` <= kMaxTile tokens.

__attribute__((target_clones("avx2", "default"))) void TilePortable(
    const float* q, int64_t group, int64_t hd, const float* k, const float* v, int64_t stride,
    int64_t count, float scale, float* state, int64_t sd, const float* next_k, const float* next_v,
    int64_t next_count) {
  float p[kMaxTile];
  for (int64_t g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* acc = state + g * sd;
    // The first head's pass reads the tile from memory: it prefetches.
    const int64_t pf = g == 0 ? next_count : 0;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < count; ++j) {
      if (j < pf) PrefetchRow(next_k + j * stride, hd);
      const float* kr = k + j * stride;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < hd; ++d) dot += qg[d] * kr[d];
      p[j] = dot * scale;
      mx = std::max(mx, p[j]);
    }
    const float m_old = acc[hd];
    const float m_new = std::max(m_old, mx);
    // exp(-inf) = 0 on the first tile: acc and l start at zero anyway.
    const float corr = internal::ExpApprox(m_old - m_new);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < count; ++j) {
      p[j] = internal::ExpApprox(p[j] - m_new);
      sum += p[j];
    }
    acc[hd] = m_new;
    acc[hd + 1] = acc[hd + 1] * corr + sum;
#pragma omp simd
    for (int64_t d = 0; d < hd; ++d) acc[d] *= corr;
    for (int64_t j = 0; j < count; ++j) {
      if (j < pf) PrefetchRow(next_v + j * stride, hd);
      const float* vr = v + j * stride;
      const float pj = p[j];
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) acc[d] += pj * vr[d];
    }
  }
  // A next tile longer than this one (after a chunk's first, partial
  // block): its remaining rows.
  for (int64_t j = count; j < next_count; ++j) {
    PrefetchRow(next_k + j * stride, hd);
    PrefetchRow(next_v + j * stride, hd);
  }
}

// ---------------------------------------------------------------------------
// AVX-512 kernel: G query heads at once, so each K and V vector is loaded
// once for all of them and feeds G independent FMA chains.

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// internal::ExpApprox, 16 lanes at a time (same constants, same rounding
// steps up to FMA contraction).
TANDEM_AVX512 inline __m512 Exp512(__m512 x) {
  // vminps/vmaxps return their second operand if either is NaN: NaN stays
  // NaN, as in ExpApprox (a score from a slot never written poisons the
  // output instead of passing for a large one).
  __m512 c = _mm512_min_ps(_mm512_set1_ps(88.8f), x);
  c = _mm512_max_ps(_mm512_set1_ps(-104.5f), c);
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 kn = _mm512_fmadd_ps(c, _mm512_set1_ps(1.44269504088896341f), magic);
  const __m512 fn = _mm512_sub_ps(kn, magic);
  const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(kn), _mm512_castps_si512(magic));
  __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), r);
  const __m512 z = _mm512_mul_ps(r, r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, z, r), _mm512_set1_ps(1.0f));
  // 2^n as two normal powers of two, as in ExpApprox.
  const __m512i n1 = _mm512_srai_epi32(n, 1);
  const __m512i n2 = _mm512_sub_epi32(n, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(y, s1), s2);
}

inline __mmask16 TailMask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// Full vectors load and store unmasked (loads then fold into the FMAs);
// only the last, partial one of a head_dim that is no multiple of 16 takes
// the mask.
template <bool kMasked>
TANDEM_AVX512 inline __m512 Load(const float* p, __mmask16 m) {
  if constexpr (kMasked) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    return _mm512_loadu_ps(p);
  }
}

template <bool kMasked>
TANDEM_AVX512 inline void Store(float* p, __mmask16 m, __m512 x) {
  if constexpr (kMasked) {
    _mm512_mask_storeu_ps(p, m, x);
  } else {
    _mm512_storeu_ps(p, x);
  }
}

// 512 -> 256 bits of two vectors: [a.l0 + a.l2, a.l1 + a.l3, b.l0 + b.l2,
// b.l1 + b.l3] (l: 128-bit lanes).
TANDEM_AVX512 inline __m512 AddHalves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Two AddHalves results to one whose lane i holds 4 partial sums of input i.
TANDEM_AVX512 inline __m512 AddQuarters(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Elements 0..7 are the sums of v0 .. v7: one transposing tree of 16
// shuffles and 8 adds, instead of 8 horizontal reductions of ~9 ops each
// (which compete with the FMAs for port 5).
TANDEM_AVX512 inline __m256 Sum8(__m512 v0, __m512 v1, __m512 v2, __m512 v3, __m512 v4, __m512 v5,
                                 __m512 v6, __m512 v7) {
  const __m512 lo = AddQuarters(AddHalves(v0, v1), AddHalves(v2, v3));  // lane i: v_i
  const __m512 hi = AddQuarters(AddHalves(v4, v5), AddHalves(v6, v7));  // lane i: v_{i+4}
  // Within lanes: [lo0 + lo2, lo1 + lo3, hi0 + hi2, hi1 + hi3], then pairs.
  const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(lo, hi, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 w = _mm512_add_ps(u, _mm512_shuffle_ps(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
  // Element 4i holds sum(v_i), element 4i + 2 sum(v_{i+4}).
  const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 10, 6, 2, 12, 8, 4, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, w));
}

// Accumulator N of a[R][G] in row-major order, or zero past the end.
template <int N, int G, int R>
TANDEM_AVX512 inline __m512 AccOrZero(const __m512 (&a)[R][G]) {
  if constexpr (N < R * G) {
    return a[N / G][N % G];
  } else {
    return _mm512_setzero_ps();
  }
}

// Scores of R K rows (`stride` floats apart) for G query heads: R * G
// independent FMA chains, each q vector loaded once for the R rows. The
// first `pf_rows` rows at `pk` (the next call's) are prefetched alongside,
// a cache line for each one loaded.
template <int G, int R>
TANDEM_AVX512 __attribute__((always_inline)) inline void ScoreRows(
    const float* q, int64_t hd, int64_t hd_full, __mmask16 tail, const float* k, int64_t stride,
    float scale, float (*p)[kMaxTile], int64_t j, const float* pk, int64_t pf_rows) {
  __m512 a[R][G];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) a[r][g] = _mm512_setzero_ps();
  }
  for (int64_t d = 0; d < hd_full; d += 16) {
    __m512 kv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (r < pf_rows) Prefetch(pk + r * stride + d);
      kv[r] = _mm512_loadu_ps(k + r * stride + d);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512 qv = _mm512_loadu_ps(q + g * hd + d);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r][g] = _mm512_fmadd_ps(qv, kv[r], a[r][g]);
    }
  }
  if (tail != 0) {
    __m512 kv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (r < pf_rows) Prefetch(pk + r * stride + hd_full);
      kv[r] = _mm512_maskz_loadu_ps(tail, k + r * stride + hd_full);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512 qv = _mm512_maskz_loadu_ps(tail, q + g * hd + hd_full);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r][g] = _mm512_fmadd_ps(qv, kv[r], a[r][g]);
    }
  }
  static_assert(R * G <= 8);
  alignas(32) float sums[8];
  _mm256_store_ps(
      sums, _mm256_mul_ps(Sum8(AccOrZero<0>(a), AccOrZero<1>(a), AccOrZero<2>(a), AccOrZero<3>(a),
                               AccOrZero<4>(a), AccOrZero<5>(a), AccOrZero<6>(a), AccOrZero<7>(a)),
                          _mm256_set1_ps(scale)));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) p[g][j + r] = sums[r * G + g];
  }
}

// acc[g, d .. d+16C) = acc * corr[g] + sum_j p[g][j] v[j, d .. d+16C): the
// G * C accumulators stay in registers across the tile's V rows, and each
// broadcast p[g][j] serves C vectors. Rows j < pf_count at `pv` (the next
// call's) are prefetched alongside, a cache line for each one loaded.
template <int G, int C, bool kMasked>
TANDEM_AVX512 __attribute__((always_inline)) inline void PvStep(
    const float (*p)[kMaxTile], const float* corr, const float* v, int64_t stride, int64_t count,
    int64_t d, __mmask16 m, float* state, int64_t sd, const float* pv, int64_t pf_count) {
  __m512 a[C][G];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      a[c][g] =
          _mm512_mul_ps(Load<kMasked>(state + g * sd + d + 16 * c, m), _mm512_set1_ps(corr[g]));
    }
  }
  for (int64_t j = 0; j < count; ++j) {
    __m512 vv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      if (j < pf_count) Prefetch(pv + j * stride + d + 16 * c);
      vv[c] = Load<kMasked>(v + j * stride + d + 16 * c, m);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512 pg = _mm512_set1_ps(p[g][j]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) a[c][g] = _mm512_fmadd_ps(pg, vv[c], a[c][g]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) Store<kMasked>(state + g * sd + d + 16 * c, m, a[c][g]);
  }
}

// The three passes over a tile are separate functions (not inlined) so
// that each gets the vector registers to itself: inlined together, GCC
// kept the Exp512 constants live across the V loop and spilled its
// accumulators (G = 8 ran at half speed).

// Scores of the tile's K rows into p, kRows rows at a time.
template <int G>
TANDEM_AVX512 __attribute__((noinline)) void ScoreTile(const float* q, int64_t hd, const float* k,
                                                       int64_t stride, int64_t count, float scale,
                                                       float (*p)[kMaxTile], const float* next_k,
                                                       const float* next_v, int64_t next_count) {
  const int64_t hd_full = hd / 16 * 16;
  const __mmask16 tail = TailMask(hd - hd_full);
  // At most 8 accumulators: GCC keeps larger arrays of vectors in memory.
  constexpr int kRows = G <= 2 ? 4 : G <= 4 ? 2 : 1;
  int64_t j = 0;
  for (; j + kRows <= count; j += kRows) {
    ScoreRows<G, kRows>(q, hd, hd_full, tail, k + j * stride, stride, scale, p, j,
                        next_k + j * stride, std::clamp<int64_t>(next_count - j, 0, kRows));
  }
  for (; j < count; ++j) {
    ScoreRows<G, 1>(q, hd, hd_full, tail, k + j * stride, stride, scale, p, j, next_k + j * stride,
                    std::clamp<int64_t>(next_count - j, 0, 1));
  }
  // A next tile longer than this one (after a chunk's first, partial
  // block): its remaining rows.
  for (j = count; j < next_count; ++j) {
    PrefetchRow(next_k + j * stride, hd);
    PrefetchRow(next_v + j * stride, hd);
  }
}

// Online softmax over the tile's scores: p becomes exp(s - m_new), each
// head's m and l are updated and corr[g] = exp(m_old - m_new) is what its
// accumulator must be scaled by.
template <int G>
TANDEM_AVX512 inline void SoftmaxTile(int64_t hd, int64_t count, float (*p)[kMaxTile], float* state,
                                      int64_t sd, float* corr) {
  const __mmask16 m0 = TailMask(count);
  const __mmask16 m1 = TailMask(std::max<int64_t>(count - 16, 0));
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    float* st = state + g * sd;
    const __m512 s0 = _mm512_mask_loadu_ps(neg_inf, m0, p[g]);
    // Tiles are mostly one 16-token block: the second half only if used.
    const __m512 s1 = m1 != 0 ? _mm512_mask_loadu_ps(neg_inf, m1, p[g] + 16) : neg_inf;
    const float mx = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
    const float m_old = st[hd];
    const float m_new = std::max(m_old, mx);
    // exp(-inf) = 0 on the first tile: acc and l start at zero anyway.
    corr[g] = internal::ExpApprox(m_old - m_new);
    const __m512 mn = _mm512_set1_ps(m_new);
    __m512 e = _mm512_maskz_mov_ps(m0, Exp512(_mm512_sub_ps(s0, mn)));
    _mm512_store_ps(p[g], e);
    if (m1 != 0) {
      const __m512 e1 = _mm512_maskz_mov_ps(m1, Exp512(_mm512_sub_ps(s1, mn)));
      _mm512_store_ps(p[g] + 16, e1);
      e = _mm512_add_ps(e, e1);
    }
    st[hd] = m_new;
    st[hd + 1] = st[hd + 1] * corr[g] + _mm512_reduce_add_ps(e);
  }
}

// acc = acc * corr + p · V over the tile, kCols column vectors at a time.
template <int G>
TANDEM_AVX512 __attribute__((noinline)) void PvTile(const float (*p)[kMaxTile], const float* corr,
                                                    int64_t hd, const float* v, int64_t stride,
                                                    int64_t count, float* state, int64_t sd,
                                                    const float* next_v, int64_t next_count) {
  const int64_t hd_full = hd / 16 * 16;
  const __mmask16 tail = TailMask(hd - hd_full);
  constexpr int kCols = G <= 2 ? 4 : G <= 4 ? 2 : 1;
  const int64_t pf = std::min(count, next_count);
  int64_t d = 0;
  for (; d + 16 * kCols <= hd_full; d += 16 * kCols) {
    PvStep<G, kCols, false>(p, corr, v, stride, count, d, tail, state, sd, next_v, pf);
  }
  for (; d < hd_full; d += 16) {
    PvStep<G, 1, false>(p, corr, v, stride, count, d, tail, state, sd, next_v, pf);
  }
  if (tail != 0) {
    PvStep<G, 1, true>(p, corr, v, stride, count, hd_full, tail, state, sd, next_v, pf);
  }
}

// The tile (k, v: `count` rows, `stride` floats apart, hd floats each) for
// G query heads, prefetching the next call's rows as it goes.
template <int G>
TANDEM_AVX512 void TileAvx512G(const float* q, int64_t hd, const float* k, const float* v,
                               int64_t stride, int64_t count, float scale, float* state, int64_t sd,
                               const float* next_k, const float* next_v, int64_t next_count) {
  alignas(64) float p[G][kMaxTile];
  float corr[G];
  ScoreTile<G>(q, hd, k, stride, count, scale, p, next_k, next_v, next_count);
  SoftmaxTile<G>(hd, count, p, state, sd, corr);
  PvTile<G>(p, corr, hd, v, stride, count, state, sd, next_v, next_count);
}

TANDEM_AVX512 void TileAvx512(const float* q, int64_t group, int64_t hd, const float* k,
                              const float* v, int64_t stride, int64_t count, float scale,
                              float* state, int64_t sd, const float* next_k, const float* next_v,
                              int64_t next_count) {
  for (int64_t g0 = 0; g0 < group; g0 += kMaxGroup) {
    const float* qg = q + g0 * hd;
    float* st = state + g0 * sd;
    // Slices after the first find the tile in L1: nothing more to prefetch.
    const int64_t nc = g0 == 0 ? next_count : 0;
    switch (std::min<int64_t>(kMaxGroup, group - g0)) {
      case 1:
        TileAvx512G<1>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
      case 2:
        TileAvx512G<2>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
      case 3:
        TileAvx512G<3>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
      case 4:
        TileAvx512G<4>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
      case 5:
        TileAvx512G<5>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
      case 6:
        TileAvx512G<6>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
      case 7:
        TileAvx512G<7>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
      default:
        TileAvx512G<8>(qg, hd, k, v, stride, count, scale, st, sd, next_k, next_v, nc);
        break;
    }
  }
}

// ---------------------------------------------------------------------------
// Driver.

struct Item {
  int64_t seq;     // index into the queries
  int64_t t0, t1;  // token range [t0, t1); t0 is a multiple of block_size
};

struct Scratch {
  std::vector<Item> items;
  std::vector<int64_t> first;    // [count + 1]: each sequence's first item
  std::vector<int64_t> pending;  // [count]: items of the sequence not yet done
  std::vector<float> state;      // [items, heads, sd] + alignment slack
};

// One item: its chunk's tiles, every kv head, every query head.
void RunItem(const DecodeQuery& dq, const Item& it, int64_t heads, const PagedKvLayer& kv,
             float scale, bool avx512, float* state, int64_t sd) {
  const int64_t hd = kv.head_dim, bs = kv.block_size, kvh_count = kv.kv_heads;
  const int64_t group = heads / kvh_count;
  // A block is [kv_heads, block_size, head_dim]: a tile of one kv head is
  // `n` consecutive rows of hd floats, and the block's next kv head starts
  // bs rows on.
  const int64_t head_stride = bs * hd;
  // The tile starting at token t: the offset of its kv head 0 row and its
  // length.
  auto tile = [&](int64_t t, int64_t* at) {
    const int64_t off = t % bs;
    *at = (static_cast<int64_t>(dq.block_table[t / bs]) * kvh_count * bs + off) * hd;
    return std::min({kMaxTile, bs - off, it.t1 - t});
  };
  int64_t at = 0;
  int64_t n = tile(it.t0, &at);
  for (int64_t h = 0; h < heads; ++h) {
    float* st = state + h * sd;
    std::fill(st, st + hd, 0.0f);
    st[hd] = -std::numeric_limits<float>::infinity();
    st[hd + 1] = 0.0f;
  }
  for (int64_t t = it.t0; t < it.t1;) {
    int64_t next_at = 0;
    const int64_t next_n = t + n < it.t1 ? tile(t + n, &next_at) : 0;
    for (int64_t kvh = 0; kvh < kvh_count; ++kvh) {
      const float* q = dq.q + kvh * group * hd;
      float* st = state + kvh * group * sd;
      const int64_t off = at + kvh * head_stride;
      // What the next call reads: this tile's next kv head, or the next
      // tile's first.
      const bool last = kvh + 1 == kvh_count;
      const int64_t next_off = last ? next_at : off + head_stride;
      const int64_t nn = last ? next_n : n;
      if (avx512) {
        TileAvx512(q, group, hd, kv.k + off, kv.v + off, hd, n, scale, st, sd, kv.k + next_off,
                   kv.v + next_off, nn);
      } else {
        TilePortable(q, group, hd, kv.k + off, kv.v + off, hd, n, scale, st, sd, kv.k + next_off,
                     kv.v + next_off, nn);
      }
    }
    t += n;
    at = next_at;
    n = next_n;
  }
}

// Combines the chunks' states of one query head: out = sum_c w_c acc_c /
// sum_c w_c l_c with w_c = exp(m_c - max_c m_c).
void Merge(const float* state, int64_t first, int64_t last, int64_t heads, int64_t h, int64_t hd,
           int64_t sd, float* out) {
  const float* s0 = state + (first * heads + h) * sd;
  if (last - first == 1) {
    const float inv = 1.0f / s0[hd + 1];
    for (int64_t d = 0; d < hd; ++d) out[d] = s0[d] * inv;
    return;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t c = first; c < last; ++c) mx = std::max(mx, state[(c * heads + h) * sd + hd]);
  std::fill(out, out + hd, 0.0f);
  float l = 0.0f;
  for (int64_t c = first; c < last; ++c) {
    const float* s = state + (c * heads + h) * sd;
    const float w = std::exp(s[hd] - mx);
    l += w * s[hd + 1];
    for (int64_t d = 0; d < hd; ++d) out[d] += w * s[d];
  }
  const float inv = 1.0f / l;
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

}  // namespace

void AttendDecode(const DecodeQuery* queries, int64_t count, int64_t heads, const PagedKvLayer& kv,
                  float scale, bool allow_avx512) {
  TANDEM_CHECK(kv.block_size > 0 && kv.kv_heads > 0 && kv.head_dim > 0);
  TANDEM_CHECK(heads > 0 && heads % kv.kv_heads == 0);
  TANDEM_CHECK(count >= 0);
  if (count == 0) return;
  int64_t total = 0;
  for (int64_t s = 0; s < count; ++s) {
    TANDEM_CHECK(queries[s].len > 0);
    total += queries[s].len;
  }
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const bool avx512 = allow_avx512 && MaxKernelIsa() >= KernelIsa::kAvx512;

  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t kv_bytes = 2 * total * kv.kv_heads * hd * static_cast<int64_t>(sizeof(float));
  const bool parallel = threads > 1 && kv_bytes >= kMinParallelBytes;

  // This thread's scratch, read and written by the team; grown once.
  thread_local Scratch scratch;
  scratch.items.clear();
  scratch.first.resize(static_cast<size_t>(count + 1));
  scratch.pending.resize(static_cast<size_t>(count));
  for (int64_t s = 0; s < count; ++s) {
    const size_t n_before = scratch.items.size();
    scratch.first[static_cast<size_t>(s)] = static_cast<int64_t>(n_before);
    const int64_t chunk = DecodeChunk(queries[s].len, bs);
    for (int64_t t0 = 0; t0 < queries[s].len; t0 += chunk) {
      scratch.items.push_back({s, t0, std::min(queries[s].len, t0 + chunk)});
    }
    scratch.pending[static_cast<size_t>(s)] = static_cast<int64_t>(scratch.items.size() - n_before);
  }
  const int64_t num_items = static_cast<int64_t>(scratch.items.size());
  scratch.first[static_cast<size_t>(count)] = num_items;
  const int64_t sd = StateStride(hd);
  const size_t need = static_cast<size_t>(num_items * heads * sd + 16);
  if (scratch.state.size() < need) scratch.state.resize(need);
  // 64-byte aligned start, so every head's acc starts on a cache line.
  float* state = scratch.state.data();
  state += (16 - (reinterpret_cast<uintptr_t>(state) / sizeof(float)) % 16) % 16;
  const Item* items = scratch.items.data();
  const int64_t* first = scratch.first.data();
  int64_t* pending = scratch.pending.data();

  // Whoever finishes a sequence's last item merges it, so the team meets
  // only once, at the end (a barrier costs a wake-up on a loaded machine).
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t i = 0; i < num_items; ++i) {
    const int64_t s = items[i].seq;
    const DecodeQuery& dq = queries[s];
    RunItem(dq, items[i], heads, kv, scale, avx512, state + i * heads * sd, sd);
    // acq_rel: the merging thread sees every other item's state.
    if (std::atomic_ref<int64_t>(pending[s]).fetch_sub(1, std::memory_order_acq_rel) == 1) {
      for (int64_t h = 0; h < heads; ++h) {
        Merge(state, first[s], first[s + 1], heads, h, hd, sd, dq.out + h * hd);
      }
    }
  }
}

}  // namespace tandem::ops
