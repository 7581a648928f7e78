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
// will read while it reads its own (see Prefetch): a block stores each kv
// head's keys and values together, so a slice is one contiguous run of
// memory, the reads stay within one block and the next slice's address is
// known. Keys lie transposed within a block (attention.h), so the kernels
// form 16 scores as 16 lanes of one vector and never reduce across lanes.

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
// flight, and the sums take a good part of a tile's read time: ~13-15 GB/s
// per core from L2 against ~11-12 from DRAM at GQA 4). The hint is prefetcht2
// (to L2): the next call is a few microseconds away, and on the development
// VM it read 2-5% faster than prefetcht0 in tandem_ops_bench's
// BM_AttendDecode (1 GiB of KV, 2 threads, mean of 4 interleaved runs).
// One thread, AVX-512: 7.5 GB/s without prefetching, 11.5 with.
inline void Prefetch(const float* p) { __builtin_prefetch(p, 0, 1); }  // prefetcht2
inline void PrefetchRow(const float* p, int64_t hd) {
  for (int64_t d = 0; d < hd; d += 16) Prefetch(p + d);
}
// The lines of a tile's transposed keys (`count` keys from `kt`, `kstride`
// floats between dimensions).
inline void PrefetchKeys(const float* kt, int64_t kstride, int64_t hd, int64_t count) {
  for (int64_t d = 0; d < hd; ++d) {
    for (int64_t j = 0; j < count; j += 16) Prefetch(kt + d * kstride + j);
  }
}

// ---------------------------------------------------------------------------
// Portable kernel (compiler-vectorised): one query head at a time; the
// tile's keys and values come from L1 after the first head.
//
// q [group, hd]; kt points at the tile's first key of its kv-head slice,
// dimension d of key j at kt[d * kstride + j]; v at its first value row,
// rows `vstride` floats apart; `count` <= kMaxTile tokens.

__attribute__((target_clones("avx2", "default"))) void TilePortable(
    const float* q, int64_t group, int64_t hd, const float* kt, int64_t kstride, const float* v,
    int64_t vstride, int64_t count, float scale, float* state, int64_t sd, const float* next_k,
    const float* next_v, int64_t next_count) {
  float p[kMaxTile];
  for (int64_t g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* acc = state + g * sd;
    // The first head's pass reads the tile from memory: it prefetches.
    const int64_t pf = g == 0 ? next_count : 0;
    // Even and odd dimensions in two partial sums, each summed 8
    // dimensions at a time into a fresh one then added to its total, as
    // the AVX-512 kernel does at G = 4 (for its rounding error).
    float t0[kMaxTile], t1[kMaxTile], a0[kMaxTile], a1[kMaxTile];
    std::fill(t0, t0 + count, 0.0f);
    std::fill(t1, t1 + count, 0.0f);
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
      std::fill(a0, a0 + count, 0.0f);
      std::fill(a1, a1 + count, 0.0f);
      for (int64_t d = d0; d < std::min(hd, d0 + 16); ++d) {
        const float qd = qg[d];
        const float* kd = kt + d * kstride;
        for (int64_t j = 0; j < pf; j += 16) Prefetch(next_k + d * kstride + j);
        float* ad = (d - d0) % 2 == 0 ? a0 : a1;
#pragma omp simd
        for (int64_t j = 0; j < count; ++j) ad[j] += qd * kd[j];
      }
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) {
        t0[j] += a0[j];
        t1[j] += a1[j];
      }
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < count; ++j) {
      p[j] = (t0[j] + t1[j]) * scale;
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
      if (j < pf) PrefetchRow(next_v + j * vstride, hd);
      const float* vr = v + j * vstride;
      const float pj = p[j];
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) acc[d] += pj * vr[d];
    }
  }
  // A next tile longer than this one (after a chunk's first, partial
  // block): its remaining value rows.
  for (int64_t j = count; j < next_count; ++j) PrefetchRow(next_v + j * vstride, hd);
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

// G * P accumulators over the dimensions [d, d_end) (a multiple of P
// long), each a sum of FMAs from zero; the last `tail` dimensions go to the
// first partial sum.
template <int G, int P>
TANDEM_AVX512 __attribute__((always_inline)) inline void DotKeys(
    const float* q, int64_t hd, const float* k, int64_t kstride, __mmask16 m, const float* nk,
    bool pf, int64_t d, int64_t d_end, int64_t tail, __m512 (&a)[P][G]) {
#pragma GCC unroll 8
  for (int r = 0; r < P; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) a[r][g] = _mm512_setzero_ps();
  }
  for (; d < d_end; d += P) {
#pragma GCC unroll 8
    for (int r = 0; r < P; ++r) {
      if (pf) Prefetch(nk + (d + r) * kstride);
      const __m512 kv = _mm512_maskz_loadu_ps(m, k + (d + r) * kstride);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        a[r][g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * hd + d + r]), kv, a[r][g]);
      }
    }
  }
  // Constant indices keep a in registers.
  for (int64_t e = d; e < d + tail; ++e) {
    if (pf) Prefetch(nk + e * kstride);
    const __m512 kv = _mm512_maskz_loadu_ps(m, k + e * kstride);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      a[0][g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * hd + e]), kv, a[0][g]);
    }
  }
}

// Scores of the tile's keys into p, 16 keys at a time. With the keys
// transposed, dimension d of 16 keys is one vector: each query head's 16
// scores build up in the lanes of one accumulator, one FMA per dimension
// with the broadcast q[g][d], and need no reduction across lanes (with
// row-major keys, reducing each key's 16 lanes cost about as much as its
// FMAs at head_dim 64). The dimensions are split over P interleaved partial
// sums (8 independent FMA chains at G = 4, to hide the FMA latency), each
// summed 8 dimensions at a time into a fresh register then added to its
// total, and the totals added pairwise: that keeps a score's rounding error
// near the row-major kernel's (16 lanes of hd / 16 terms each; one chain of
// 128 dimensions doubled the decode test's worst error and broke its 1e-5
// bound at q_scale 8). At most 4 heads at a time keep the accumulators in
// registers; a larger group runs in two slices (ScoreTile), the second
// finding the keys in L1. The next call's keys are prefetched alongside,
// a line for each line loaded.
template <int G>
TANDEM_AVX512 __attribute__((always_inline)) inline void ScoreKeys(
    const float* q, int64_t hd, const float* kt, int64_t kstride, int64_t count, float scale,
    float (*p)[kMaxTile], const float* next_k, int64_t next_count) {
  static_assert(G <= 4);
  constexpr int P = G == 1 ? 8 : G == 2 ? 4 : 2;
  constexpr int64_t kRun = 8;
  constexpr int64_t kSpan = kRun * P;  // dimensions per round
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < count; j += 16) {
    const __mmask16 m = TailMask(count - j);
    const bool pf = j < next_count;
    const float* k = kt + j;
    const float* nk = next_k + j;
    __m512 t[P][G];
    const int64_t first_end = std::min(hd, kSpan);
    DotKeys<G, P>(q, hd, k, kstride, m, nk, pf, 0, first_end / P * P, first_end % P, t);
    for (int64_t d = kSpan; d < hd; d += kSpan) {
      const int64_t end = std::min(hd, d + kSpan);
      __m512 a[P][G];
      DotKeys<G, P>(q, hd, k, kstride, m, nk, pf, d, d + (end - d) / P * P, (end - d) % P, a);
#pragma GCC unroll 8
      for (int r = 0; r < P; ++r) {
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) t[r][g] = _mm512_add_ps(t[r][g], a[r][g]);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      __m512 s[P];
#pragma GCC unroll 8
      for (int r = 0; r < P; ++r) s[r] = t[r][g];
#pragma GCC unroll 4
      for (int w = 1; w < P; w *= 2) {
#pragma GCC unroll 8
        for (int r = 0; r + w < P; r += 2 * w) s[r] = _mm512_add_ps(s[r], s[r + w]);
      }
      _mm512_store_ps(p[g] + j, _mm512_mul_ps(s[0], sc));
    }
  }
}

template <int G>
TANDEM_AVX512 __attribute__((noinline)) void ScoreTile(const float* q, int64_t hd, const float* kt,
                                                       int64_t kstride, int64_t count, float scale,
                                                       float (*p)[kMaxTile], const float* next_k,
                                                       const float* next_v, int64_t vstride,
                                                       int64_t next_count) {
  if constexpr (G <= 4) {
    ScoreKeys<G>(q, hd, kt, kstride, count, scale, p, next_k, next_count);
  } else {
    ScoreKeys<4>(q, hd, kt, kstride, count, scale, p, next_k, next_count);
    ScoreKeys<G - 4>(q + 4 * hd, hd, kt, kstride, count, scale, p + 4, next_k, 0);
  }
  // A next tile longer than this one (after a chunk's first, partial
  // block): its remaining keys and value rows.
  const int64_t covered = (count + 15) / 16 * 16;
  if (next_count > covered) PrefetchKeys(next_k + covered, kstride, hd, next_count - covered);
  for (int64_t r = count; r < next_count; ++r) PrefetchRow(next_v + r * vstride, hd);
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
    // Past the first tiles the maximum seldom moves, and ExpApprox(0) is
    // exactly 1: the scalar exp is skipped then.
    corr[g] = m_new == m_old ? 1.0f : internal::ExpApprox(m_old - m_new);
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

// The tile for G query heads (kt: its transposed keys, `kstride` floats
// between dimensions; v: `count` value rows of hd floats, hd apart),
// prefetching the next call's keys and values as it goes.
template <int G>
TANDEM_AVX512 void TileAvx512G(const float* q, int64_t hd, const float* kt, int64_t kstride,
                               const float* v, int64_t count, float scale, float* state, int64_t sd,
                               const float* next_k, const float* next_v, int64_t next_count) {
  alignas(64) float p[G][kMaxTile];
  float corr[G];
  ScoreTile<G>(q, hd, kt, kstride, count, scale, p, next_k, next_v, hd, next_count);
  SoftmaxTile<G>(hd, count, p, state, sd, corr);
  PvTile<G>(p, corr, hd, v, hd, count, state, sd, next_v, next_count);
}

TANDEM_AVX512 void TileAvx512(const float* q, int64_t group, int64_t hd, const float* kt,
                              int64_t kstride, const float* v, int64_t count, float scale,
                              float* state, int64_t sd, const float* next_k, const float* next_v,
                              int64_t next_count) {
  for (int64_t g0 = 0; g0 < group; g0 += kMaxGroup) {
    const float* qg = q + g0 * hd;
    float* st = state + g0 * sd;
    // Slices after the first find the tile in L1: nothing more to prefetch.
    const int64_t nc = g0 == 0 ? next_count : 0;
    switch (std::min<int64_t>(kMaxGroup, group - g0)) {
#define TANDEM_TILE_CASE(G)                                                                  \
  case G:                                                                                    \
    TileAvx512G<G>(qg, hd, kt, kstride, v, count, scale, st, sd, next_k, next_v, nc); \
    break;
      TANDEM_TILE_CASE(1)
      TANDEM_TILE_CASE(2)
      TANDEM_TILE_CASE(3)
      TANDEM_TILE_CASE(4)
      TANDEM_TILE_CASE(5)
      TANDEM_TILE_CASE(6)
      TANDEM_TILE_CASE(7)
      TANDEM_TILE_CASE(8)
#undef TANDEM_TILE_CASE
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
  // A block holds, per kv head, bs keys transposed ([head_dim, block_size])
  // and bs value rows ([block_size, head_dim]): a tile of one kv head is a
  // column range of the first and `n` consecutive rows of the second, and
  // the block's next kv head starts bs * hd floats on in both.
  const int64_t head_stride = bs * hd;
  // The tile starting at token t: the offsets of its kv head 0 keys and
  // values and its length.
  struct At {
    int64_t k = 0, v = 0;
  };
  auto tile = [&](int64_t t, At* at) {
    const int64_t off = t % bs;
    const int64_t block = static_cast<int64_t>(dq.block_table[t / bs]) * kvh_count * head_stride;
    at->k = block + off;
    at->v = block + off * hd;
    return std::min({kMaxTile, bs - off, it.t1 - t});
  };
  At at;
  int64_t n = tile(it.t0, &at);
  for (int64_t h = 0; h < heads; ++h) {
    float* st = state + h * sd;
    std::fill(st, st + hd, 0.0f);
    st[hd] = -std::numeric_limits<float>::infinity();
    st[hd + 1] = 0.0f;
  }
  for (int64_t t = it.t0; t < it.t1;) {
    At next_at;
    const int64_t next_n = t + n < it.t1 ? tile(t + n, &next_at) : 0;
    for (int64_t kvh = 0; kvh < kvh_count; ++kvh) {
      const float* q = dq.q + kvh * group * hd;
      float* st = state + kvh * group * sd;
      const At cur{at.k + kvh * head_stride, at.v + kvh * head_stride};
      // What the next call reads: this tile's next kv head, or the next
      // tile's first.
      const bool last = kvh + 1 == kvh_count;
      const At next = last ? next_at : At{cur.k + head_stride, cur.v + head_stride};
      const int64_t nn = last ? next_n : n;
      if (avx512) {
        TileAvx512(q, group, hd, kv.k + cur.k, bs, kv.v + cur.v, n, scale, st, sd,
                   kv.k + next.k, kv.v + next.v, nn);
      } else {
        TilePortable(q, group, hd, kv.k + cur.k, bs, kv.v + cur.v, hd, n, scale, st, sd,
                     kv.k + next.k, kv.v + next.v, nn);
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
