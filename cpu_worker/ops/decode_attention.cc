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
// Within an item the kernel goes tile by tile and kv head by kv head
// within a tile, prefetching the slices the next call will read while it
// reads its own (see Prefetch). A tile is two runs of up to 16 tokens, each
// within one block (two 16-token blocks, or half of a larger one): a block
// stores each kv head's keys and values together, so a run's slice is one
// contiguous piece of memory and the next slices' addresses are known.
// Keys lie transposed within a block (attention.h), so the kernels form 16
// scores as 16 lanes of one vector and never reduce across lanes.

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
#include "cpu_worker/ops/decode_attention_kernels.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/vec_math.h"

namespace tandem::ops {
namespace {

using internal::attention::kMaxTile;
using internal::attention::Prefetch;
using internal::attention::PrefetchKeys;
using internal::attention::PrefetchRow;
using internal::attention::Run;
using internal::attention::TileAvx2;

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
// m and l, then (AVX-512 kernel) 16 lanes of partial sums of l. Heads lie
// `sd` floats apart (a multiple of 16, so each acc starts on a cache line).
inline int64_t StateStride(int64_t head_dim) { return (head_dim + 2 + 15) / 16 * 16 + 16; }
// Where a head's state keeps the AVX-512 kernel's lanes of l (the last 16
// floats): summed into l once, at the end of the item.
inline int64_t LaneSumsAt(int64_t sd) { return sd - 16; }

// The kernels prefetch the rows the next call reads (`next_k`/`next_v`,
// `next_count` of them; the AVX-512 kernel's `next` runs) while they read
// their own, a cache line for a line: the memory then stays busy through
// the computation instead of waiting for each tile's loads in turn (a core
// keeps only so many misses in flight, and the sums take a good part of a
// tile's read time: ~13-15 GB/s per core from L2 against ~11-12 from DRAM
// at GQA 4). The hint is prefetcht2
// (to L2): the next call is a few microseconds away, and on the development
// VM it read 2-5% faster than prefetcht0 in tandem_ops_bench's
// BM_AttendDecode (1 GiB of KV, 2 threads, mean of 4 interleaved runs).
// One thread, AVX-512: 7.5 GB/s without prefetching, 11.5 with. On the
// AMD EPYC VM (2 threads, 1 GiB): 13-15 GB/s without, 33-39 with; the
// other hints read the same, keys fetched two calls ahead no better (and
// fetched both two calls and one call ahead ~20% worse), and the values
// fetched in address order during the score pass (instead of in the order
// the value pass reads them) 10% worse (docs/PERFORMANCE.md). The helpers
// (Prefetch, PrefetchRow, PrefetchKeys) are in decode_attention_kernels.h,
// shared with the AVX2 kernel.

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

// a[c][g] += sum_j p[g][p0 + j] v[j, d + 16c ..] over the `count` value
// rows of one run; rows j < pf_count at `pv` (the next call's) are
// prefetched alongside, a cache line for each one loaded.
template <int G, int C, bool kMasked>
TANDEM_AVX512 __attribute__((always_inline)) inline void PvRows(
    const float (*p)[kMaxTile], int64_t p0, const float* v, int64_t hd, int64_t count, int64_t d,
    __mmask16 m, const float* pv, int64_t pf_count, __m512 (&a)[C][G]) {
  for (int64_t j = 0; j < count; ++j) {
    __m512 vv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      if (j < pf_count) Prefetch(pv + j * hd + d + 16 * c);
      vv[c] = Load<kMasked>(v + j * hd + d + 16 * c, m);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512 pg = _mm512_set1_ps(p[g][p0 + j]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) a[c][g] = _mm512_fmadd_ps(pg, vv[c], a[c][g]);
    }
  }
}

// acc[g, d .. d+16C) = acc * corr[g] + sum_j p[g][j] v[j, d .. d+16C)
// over both runs (run 1's scores at p[g][16 ..]): the G * C accumulators
// stay in registers across the tile's V rows, and each broadcast p[g][j]
// serves C vectors.
template <int G, int C, bool kMasked>
TANDEM_AVX512 __attribute__((always_inline)) inline void PvStep(
    const float (*p)[kMaxTile], const float* corr, const Run (&r)[2], int64_t hd, int64_t d,
    __mmask16 m, float* state, int64_t sd, const Run (&next)[2]) {
  __m512 a[C][G];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      a[c][g] =
          _mm512_mul_ps(Load<kMasked>(state + g * sd + d + 16 * c, m), _mm512_set1_ps(corr[g]));
    }
  }
  PvRows<G, C, kMasked>(p, 0, r[0].v, hd, r[0].n, d, m, next[0].v,
                        std::min(r[0].n, next[0].n), a);
  PvRows<G, C, kMasked>(p, 16, r[1].v, hd, r[1].n, d, m, next[1].v,
                        std::min(r[1].n, next[1].n), a);
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

// One dimension of R runs' keys (`at` floats past kd[x], masked by m[x])
// times the G heads' q at that dimension (qd[g]), added to a[x][g];
// prefetching the next call's line of each run (nkd[x] + at) if kPf.
template <int G, int R, bool kPf>
TANDEM_AVX512 __attribute__((always_inline)) inline void DotDimension(
    const float* qd, const float* const (&kd)[2], const float* const (&nkd)[2], int64_t at,
    const __mmask16 (&m)[2], __m512 (&a)[R][G]) {
  __m512 kv[R];
#pragma GCC unroll 2
  for (int x = 0; x < R; ++x) {
    if constexpr (kPf) Prefetch(nkd[x] + at);
    kv[x] = _mm512_maskz_loadu_ps(m[x], kd[x] + at);
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    const __m512 qg = _mm512_set1_ps(qd[g]);
#pragma GCC unroll 2
    for (int x = 0; x < R; ++x) a[x][g] = _mm512_fmadd_ps(qg, kv[x], a[x][g]);
  }
}

// G * P accumulators per run over the dimensions [d, d_end) (a multiple of
// P long), each a sum of FMAs from zero; the last `tail` dimensions go to
// the first partial sum. R runs (1 or 2) of 16 keys share each broadcast of
// q. q is dimension-major ([hd][G], see QueryByDimension): the broadcasts
// of one step come from one pointer at constant offsets, and the loop keeps
// its pointers in registers (with a pointer per head, GCC ran out of them
// at G = 4 and moved some to the stack and to vector registers inside the
// loop). kPf: whether the next call's keys (nk) are prefetched, a line for
// each line loaded.
template <int G, int P, int R, bool kPf>
TANDEM_AVX512 __attribute__((always_inline)) inline void DotKeys(
    const float* q, const float* const (&k)[2], int64_t kstride, const __mmask16 (&m)[2],
    const float* const (&nk)[2], int64_t d, int64_t d_end, int64_t tail, __m512 (&a)[P][R][G]) {
#pragma GCC unroll 8
  for (int r = 0; r < P; ++r) {
#pragma GCC unroll 2
    for (int x = 0; x < R; ++x) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) a[r][x][g] = _mm512_setzero_ps();
    }
  }
  const float* qd = q + d * G;
  const int64_t at = d * kstride;
  const float* kd[2] = {k[0] + at, k[1] + at};
  const float* nkd[2] = {nk[0] + at, nk[1] + at};
  for (; d < d_end; d += P) {
#pragma GCC unroll 8
    for (int r = 0; r < P; ++r) DotDimension<G, R, kPf>(qd + r * G, kd, nkd, r * kstride, m, a[r]);
    qd += P * G;
#pragma GCC unroll 2
    for (int x = 0; x < R; ++x) {
      kd[x] += P * kstride;
      nkd[x] += P * kstride;
    }
  }
  // Constant indices keep a in registers.
  for (int64_t e = 0; e < tail; ++e) {
    DotDimension<G, R, kPf>(qd + e * G, kd, nkd, e * kstride, m, a[0]);
  }
}

// Partial sums per score, so that 8 or so independent FMA chains hide the
// FMA latency: one run keeps 8 (6 at G = 3); two runs have twice the
// accumulators per partial sum, so half the partial sums keep 8 (12 at
// G = 3), and at G = 4 one sum is all the registers allow.
template <int G, int R>
constexpr int PartialSums() {
  if constexpr (R == 1) {
    return G == 1 ? 8 : G == 2 ? 4 : 2;
  } else {
    return G == 1 ? 4 : G == 2 ? 2 : G == 3 ? 2 : 1;
  }
}

// Scores of R runs' 16 keys each (run x's into p[g][16 x ..]). With the
// keys transposed, dimension d of 16 keys is one vector: each query head's
// 16 scores build up in the lanes of one accumulator, one FMA per dimension
// with the broadcast q[g][d], and need no reduction across lanes (with
// row-major keys, reducing each key's 16 lanes cost about as much as its
// FMAs at head_dim 64). The dimensions are split over P interleaved
// partial sums (PartialSums), each summed 8 dimensions at a time into a
// fresh register then added to its total, and the totals added pairwise:
// that keeps a score's rounding error near the row-major kernel's (16
// lanes of hd / 16 terms each; one chain of 128 dimensions doubled the
// decode test's worst error and broke its 1e-5 bound at q_scale 8).
template <int G, int R, bool kPf>
TANDEM_AVX512 __attribute__((always_inline)) inline void ScoreRuns(
    const float* q, int64_t hd, const float* const (&k)[2], int64_t kstride,
    const __mmask16 (&m)[2], float scale, float (*p)[kMaxTile], const float* const (&nk)[2]) {
  constexpr int P = PartialSums<G, R>();
  constexpr int64_t kRun = 8;
  constexpr int64_t kSpan = kRun * P;  // dimensions per round
  __m512 t[P][R][G];
  const int64_t first_end = std::min(hd, kSpan);
  DotKeys<G, P, R, kPf>(q, k, kstride, m, nk, 0, first_end / P * P, first_end % P, t);
  for (int64_t d = kSpan; d < hd; d += kSpan) {
    const int64_t end = std::min(hd, d + kSpan);
    __m512 a[P][R][G];
    DotKeys<G, P, R, kPf>(q, k, kstride, m, nk, d, d + (end - d) / P * P, (end - d) % P, a);
#pragma GCC unroll 2
    for (int x = 0; x < R; ++x) {
#pragma GCC unroll 8
      for (int r = 0; r < P; ++r) {
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) t[r][x][g] = _mm512_add_ps(t[r][x][g], a[r][x][g]);
      }
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 2
  for (int x = 0; x < R; ++x) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      __m512 s[P];
#pragma GCC unroll 8
      for (int r = 0; r < P; ++r) s[r] = t[r][x][g];
#pragma GCC unroll 4
      for (int w = 1; w < P; w *= 2) {
#pragma GCC unroll 8
        for (int r = 0; r + w < P; r += 2 * w) s[r] = _mm512_add_ps(s[r], s[r + w]);
      }
      _mm512_store_ps(p[g] + 16 * x, _mm512_mul_ps(s[0], sc));
    }
  }
}

// Scores of the tile's tokens into p for G <= 4 heads (q: theirs,
// dimension-major), prefetching the next call's keys if `pf`.
template <int G>
TANDEM_AVX512 __attribute__((always_inline)) inline void ScoreKeys(
    const float* q, int64_t hd, const Run (&r)[2], int64_t kstride, float scale,
    float (*p)[kMaxTile], const Run (&next)[2], bool pf) {
  static_assert(G <= 4);
  // An empty run's pointers stand in for a real one's, so that no address
  // is formed from a null pointer: an empty second run is not read (R = 1),
  // an empty next second run prefetches the first's lines again
  // (harmless), and an empty next tile is not prefetched (pf false).
  const float* const k[2] = {r[0].k, r[1].n > 0 ? r[1].k : r[0].k};
  const float* const nk0 = next[0].n > 0 ? next[0].k : r[0].k;
  const float* const nk[2] = {nk0, next[1].n > 0 ? next[1].k : nk0};
  const __mmask16 m[2] = {TailMask(r[0].n), TailMask(r[1].n)};
  if (r[1].n > 0) {
    if (pf) {
      ScoreRuns<G, 2, true>(q, hd, k, kstride, m, scale, p, nk);
    } else {
      ScoreRuns<G, 2, false>(q, hd, k, kstride, m, scale, p, nk);
    }
  } else if (pf) {
    ScoreRuns<G, 1, true>(q, hd, k, kstride, m, scale, p, nk);
  } else {
    ScoreRuns<G, 1, false>(q, hd, k, kstride, m, scale, p, nk);
  }
}

// At most 4 heads at a time keep the accumulators in registers; a larger
// group runs in two slices, the second finding the keys in L1. The next
// call's keys are prefetched alongside, a line for each line loaded.
template <int G>
TANDEM_AVX512 __attribute__((noinline)) void ScoreTile(const float* q, int64_t hd,
                                                       const Run (&r)[2], int64_t kstride,
                                                       float scale, float (*p)[kMaxTile],
                                                       const Run (&next)[2]) {
  const bool pf = next[0].n > 0;
  if constexpr (G <= 4) {
    ScoreKeys<G>(q, hd, r, kstride, scale, p, next, pf);
  } else {
    ScoreKeys<4>(q, hd, r, kstride, scale, p, next, pf);
    ScoreKeys<G - 4>(q + 4 * hd, hd, r, kstride, scale, p + 4, next, false);
  }
  // A next run longer than this one (after a chunk's first, partial
  // block): its remaining keys and value rows.
  for (int x = 0; x < 2; ++x) {
    const int64_t have = r[x].n > 0 ? 16 : 0;
    if (next[x].n > have) PrefetchKeys(next[x].k + have, kstride, hd, next[x].n - have);
    for (int64_t j = r[x].n; j < next[x].n; ++j) PrefetchRow(next[x].v + j * hd, hd);
  }
}

// Online softmax over the tile's scores: p becomes exp(s - m_new), each
// head's m and its lanes of l are updated and corr[g] = exp(m_old - m_new)
// is what its accumulator must be scaled by. Past the first tiles the
// maximum seldom moves: a compare against it (no reduction across lanes)
// finds the tiles where it does, and only those take the maximum and the
// scalar exp. l is kept as 16 lane sums (summed once per item, in
// RunItem), so a tile needs no reduction across lanes at all; a score that
// is NaN compares false, gives p = NaN and poisons the output as before.
template <int G>
TANDEM_AVX512 inline void SoftmaxTile(int64_t hd, const Run (&r)[2], float (*p)[kMaxTile],
                                      float* state, int64_t sd, float* corr) {
  const __mmask16 m0 = TailMask(r[0].n);
  const __mmask16 m1 = TailMask(r[1].n);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const int64_t lanes = LaneSumsAt(sd);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    float* st = state + g * sd;
    const __m512 s0 = _mm512_mask_loadu_ps(neg_inf, m0, p[g]);
    const __m512 s1 = m1 != 0 ? _mm512_mask_loadu_ps(neg_inf, m1, p[g] + 16) : neg_inf;
    const float m_old = st[hd];
    const __m512 mo = _mm512_set1_ps(m_old);
    corr[g] = 1.0f;
    if ((_mm512_cmp_ps_mask(s0, mo, _CMP_GT_OQ) | _mm512_cmp_ps_mask(s1, mo, _CMP_GT_OQ)) != 0) {
      const float m_new = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
      // exp(-inf) = 0 on the first tile: acc and l start at zero anyway.
      corr[g] = internal::ExpApprox(m_old - m_new);
      st[hd] = m_new;
    }
    const __m512 mn = _mm512_set1_ps(st[hd]);
    __m512 e = _mm512_maskz_mov_ps(m0, Exp512(_mm512_sub_ps(s0, mn)));
    _mm512_store_ps(p[g], e);
    if (m1 != 0) {
      const __m512 e1 = _mm512_maskz_mov_ps(m1, Exp512(_mm512_sub_ps(s1, mn)));
      _mm512_store_ps(p[g] + 16, e1);
      e = _mm512_add_ps(e, e1);
    }
    __m512 l = _mm512_load_ps(st + lanes);
    if (corr[g] != 1.0f) l = _mm512_mul_ps(l, _mm512_set1_ps(corr[g]));
    _mm512_store_ps(st + lanes, _mm512_add_ps(l, e));
  }
}

// acc = acc * corr + p · V over the tile, kCols column vectors at a time.
template <int G>
TANDEM_AVX512 __attribute__((noinline)) void PvTile(const float (*p)[kMaxTile], const float* corr,
                                                    int64_t hd, const Run (&r)[2], float* state,
                                                    int64_t sd, const Run (&next)[2]) {
  const int64_t hd_full = hd / 16 * 16;
  const __mmask16 tail = TailMask(hd - hd_full);
  // 4 column vectors up to 4 heads: 16 accumulators, and each broadcast of
  // p serves 4 FMAs (2 columns at G = 4 measured ~5% slower from L3).
  constexpr int kCols = G <= 4 ? 4 : 1;
  int64_t d = 0;
  for (; d + 16 * kCols <= hd_full; d += 16 * kCols) {
    PvStep<G, kCols, false>(p, corr, r, hd, d, tail, state, sd, next);
  }
  for (; d < hd_full; d += 16) PvStep<G, 1, false>(p, corr, r, hd, d, tail, state, sd, next);
  if (tail != 0) PvStep<G, 1, true>(p, corr, r, hd, hd_full, tail, state, sd, next);
}

// The tile for G query heads (q: theirs as QueryByDimension lays them out),
// prefetching the next call's keys and values as it goes.
template <int G>
TANDEM_AVX512 void TileAvx512G(const float* q, int64_t hd, const Run (&r)[2], int64_t kstride,
                               float scale, float* state, int64_t sd, const Run (&next)[2]) {
  alignas(64) float p[G][kMaxTile];
  float corr[G];
  ScoreTile<G>(q, hd, r, kstride, scale, p, next);
  SoftmaxTile<G>(hd, r, p, state, sd, corr);
  PvTile<G>(p, corr, hd, r, state, sd, next);
}

TANDEM_AVX512 void TileAvx512(const float* q, int64_t group, int64_t hd, const Run (&r)[2],
                              int64_t kstride, float scale, float* state, int64_t sd,
                              const Run (&next)[2]) {
  const Run none[2];
  for (int64_t g0 = 0; g0 < group; g0 += kMaxGroup) {
    const float* qg = q + g0 * hd;
    float* st = state + g0 * sd;
    // Slices after the first find the tile in L1: nothing more to prefetch.
    const Run (&nx)[2] = g0 == 0 ? next : none;
    switch (std::min<int64_t>(kMaxGroup, group - g0)) {
#define TANDEM_TILE_CASE(G)                                       \
  case G:                                                         \
    TileAvx512G<G>(qg, hd, r, kstride, scale, st, sd, nx);        \
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

// Four heads' 16 dimensions d0 .. d0 + 15 (rows q, q + hd, .., q + 3 hd)
// into out[d * 4 + g]: two rounds of unpacks pair the heads per dimension
// (a dimension per 128-bit lane, the lanes' dimensions 4 apart), then a
// transpose of the 128-bit lanes puts the dimensions in order.
TANDEM_AVX512 inline void Transpose4x16(const float* q, int64_t hd, float* out) {
  const __m512 a = _mm512_loadu_ps(q), b = _mm512_loadu_ps(q + hd);
  const __m512 c = _mm512_loadu_ps(q + 2 * hd), e = _mm512_loadu_ps(q + 3 * hd);
  const __m512d ab_lo = _mm512_castps_pd(_mm512_unpacklo_ps(a, b));
  const __m512d ab_hi = _mm512_castps_pd(_mm512_unpackhi_ps(a, b));
  const __m512d ce_lo = _mm512_castps_pd(_mm512_unpacklo_ps(c, e));
  const __m512d ce_hi = _mm512_castps_pd(_mm512_unpackhi_ps(c, e));
  // t_i: dimensions i, i + 4, i + 8 and i + 12, four heads each.
  const __m512 t0 = _mm512_castpd_ps(_mm512_unpacklo_pd(ab_lo, ce_lo));
  const __m512 t1 = _mm512_castpd_ps(_mm512_unpackhi_pd(ab_lo, ce_lo));
  const __m512 t2 = _mm512_castpd_ps(_mm512_unpacklo_pd(ab_hi, ce_hi));
  const __m512 t3 = _mm512_castpd_ps(_mm512_unpackhi_pd(ab_hi, ce_hi));
  const __m512 x0 = _mm512_shuffle_f32x4(t0, t1, 0x88), x1 = _mm512_shuffle_f32x4(t0, t1, 0xDD);
  const __m512 x2 = _mm512_shuffle_f32x4(t2, t3, 0x88), x3 = _mm512_shuffle_f32x4(t2, t3, 0xDD);
  _mm512_storeu_ps(out, _mm512_shuffle_f32x4(x0, x2, 0x88));
  _mm512_storeu_ps(out + 16, _mm512_shuffle_f32x4(x1, x3, 0x88));
  _mm512_storeu_ps(out + 32, _mm512_shuffle_f32x4(x0, x2, 0xDD));
  _mm512_storeu_ps(out + 48, _mm512_shuffle_f32x4(x1, x3, 0xDD));
}

// The AVX-512 kernels' form of a sequence's queries: per kv head, its
// group's heads in slices of 4 (the score pass's heads per call), each slice
// dimension-major: the slice of heads g0 .. g0 + G (G <= 4) at
// out + (kvh * group + g0) * hd holds q[g0 + g][d] at [d * G + g]. q and
// out are [heads, hd]. Each item makes its own copy, so no thread waits on
// another's; whole slices of 4 go 16 dimensions a step.
TANDEM_AVX512 void QueryByDimension(const float* q, int64_t kv_heads, int64_t group, int64_t hd,
                                    float* out) {
  for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
    for (int64_t g0 = 0; g0 < group; g0 += 4) {
      const int64_t n = std::min<int64_t>(4, group - g0);
      const float* src = q + (kvh * group + g0) * hd;
      float* dst = out + (kvh * group + g0) * hd;
      int64_t d = 0;
      if (n == 4) {
        for (; d + 16 <= hd; d += 16) Transpose4x16(src + d, hd, dst + d * 4);
      }
      for (; d < hd; ++d) {
        for (int64_t g = 0; g < n; ++g) dst[d * n + g] = src[g * hd + d];
      }
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

// The kernel an AttendDecode call runs (its runs that the AVX2 kernel does
// not take go to the portable one).
enum class Kernel { kPortable, kAvx2, kAvx512 };

// One item: its chunk's tiles, every kv head, every query head.
void RunItem(const DecodeQuery& dq, const Item& it, int64_t heads, const PagedKvLayer& kv,
             float scale, Kernel kernel, float* state, int64_t sd) {
  const int64_t hd = kv.head_dim, bs = kv.block_size, kvh_count = kv.kv_heads;
  const int64_t group = heads / kvh_count;
  // The queries in the vector kernels' dimension-major form (this thread's
  // copy, grown once); the portable kernel reads dq.q.
  const float* by_dim = nullptr;
  if (kernel != Kernel::kPortable) {
    thread_local std::vector<float> q_by_dim;
    if (q_by_dim.size() < static_cast<size_t>(heads * hd)) {
      q_by_dim.resize(static_cast<size_t>(heads * hd));
    }
    if (kernel == Kernel::kAvx512) {
      QueryByDimension(dq.q, kvh_count, group, hd, q_by_dim.data());
    } else {
      internal::attention::QueryByDimensionAvx2(dq.q, kvh_count, group, hd, q_by_dim.data());
    }
    by_dim = q_by_dim.data();
  }
  // A block holds, per kv head, bs keys transposed ([head_dim, block_size])
  // and bs value rows ([block_size, head_dim]): a run of one kv head is a
  // column range of the first and consecutive rows of the second, and the
  // block's next kv head starts bs * hd floats on in both.
  const int64_t head_stride = bs * hd;
  // A tile's runs as offsets of their kv head 0 keys and values.
  struct At {
    int64_t k = 0, v = 0, n = 0;
  };
  struct TileAt {
    At r[2];
    int64_t n() const { return r[0].n + r[1].n; }
  };
  // The run starting at token t, up to 16 tokens and not past the block or
  // the item.
  auto run = [&](int64_t t) {
    const int64_t off = t % bs;
    const int64_t block = static_cast<int64_t>(dq.block_table[t / bs]) * kvh_count * head_stride;
    return At{block + off, block + off * hd, std::min<int64_t>({16, bs - off, it.t1 - t})};
  };
  auto tile = [&](int64_t t) {
    TileAt x;
    if (t >= it.t1) return x;
    x.r[0] = run(t);
    if (t + x.r[0].n < it.t1) x.r[1] = run(t + x.r[0].n);
    return x;
  };
  // The pointers of a tile's runs for kv head kvh (empty runs stay empty).
  auto runs = [&](const TileAt& x, int64_t kvh, Run (&out)[2]) {
    for (int i = 0; i < 2; ++i) {
      out[i] = x.r[i].n > 0 ? Run{kv.k + x.r[i].k + kvh * head_stride,
                                  kv.v + x.r[i].v + kvh * head_stride, x.r[i].n}
                            : Run{};
    }
  };
  for (int64_t h = 0; h < heads; ++h) {
    float* st = state + h * sd;
    std::fill(st, st + hd, 0.0f);
    st[hd] = -std::numeric_limits<float>::infinity();
    st[hd + 1] = 0.0f;
    std::fill(st + LaneSumsAt(sd), st + sd, 0.0f);
  }
  TileAt cur = tile(it.t0);
  for (int64_t t = it.t0; t < it.t1;) {
    const TileAt after = tile(t + cur.n());
    for (int64_t kvh = 0; kvh < kvh_count; ++kvh) {
      float* st = state + kvh * group * sd;
      // What the next call reads: this tile's next kv head, or the next
      // tile's first.
      Run r[2], next[2];
      runs(cur, kvh, r);
      if (kvh + 1 < kvh_count) {
        runs(cur, kvh + 1, next);
      } else {
        runs(after, 0, next);
      }
      const int64_t q_at = kvh * group * hd;
      if (kernel == Kernel::kAvx512) {
        TileAvx512(by_dim + q_at, group, hd, r, bs, scale, st, sd, next);
      } else if (kernel == Kernel::kAvx2 && internal::attention::Avx2TakesRun(r[0], hd) &&
                 (r[1].n == 0 || internal::attention::Avx2TakesRun(r[1], hd))) {
        TileAvx2(by_dim + q_at, group, hd, r, bs, scale, st, sd, next);
      } else {
        // One run a call, by the AVX2 kernel where it takes the run; the
        // next call is this tile's second run, if any.
        for (int x = 0; x < 2; ++x) {
          if (r[x].n == 0) continue;
          const Run one[2] = {r[x], Run{}};
          const Run after_run[2] = {r[1], Run{}};
          const Run (&nx)[2] = x == 0 && r[1].n > 0 ? after_run : next;
          if (kernel == Kernel::kAvx2 && internal::attention::Avx2TakesRun(r[x], hd)) {
            TileAvx2(by_dim + q_at, group, hd, one, bs, scale, st, sd, nx);
          } else {
            TilePortable(dq.q + q_at, group, hd, r[x].k, bs, r[x].v, hd, r[x].n, scale, st, sd,
                         nx[0].k, nx[0].v, nx[0].n);
          }
        }
      }
    }
    t += cur.n();
    cur = after;
  }
  if (kernel == Kernel::kAvx512) {
    // The AVX-512 kernel's lanes of l, summed in a fixed order.
    for (int64_t h = 0; h < heads; ++h) {
      float* st = state + h * sd;
      const float* lanes = st + LaneSumsAt(sd);
      float l = 0.0f;
      for (int i = 0; i < 16; ++i) l += lanes[i];
      st[hd + 1] = l;
    }
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
    // Vectorised (out and the state never overlap): a scalar loop here
    // took 7% of a 512-key decode pass's time.
#pragma omp simd
    for (int64_t d = 0; d < hd; ++d) out[d] += w * s[d];
  }
  const float inv = 1.0f / l;
#pragma omp simd
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

}  // namespace

void AttendDecode(const DecodeQuery* queries, int64_t count, int64_t heads, const PagedKvLayer& kv,
                  float scale, KernelIsa max_isa) {
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
  const KernelIsa isa = std::min(max_isa, MaxKernelIsa());
  const Kernel kernel = isa >= KernelIsa::kAvx512 ? Kernel::kAvx512
                        : isa >= KernelIsa::kAvx2 ? Kernel::kAvx2
                                                  : Kernel::kPortable;

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
    RunItem(dq, items[i], heads, kv, scale, kernel, state + i * heads * sd, sd);
    // acq_rel: the merging thread sees every other item's state.
    if (std::atomic_ref<int64_t>(pending[s]).fetch_sub(1, std::memory_order_acq_rel) == 1) {
      for (int64_t h = 0; h < heads; ++h) {
        Merge(state, first[s], first[s + 1], heads, h, hd, sd, dq.out + h * hd);
      }
    }
  }
}

}  // namespace tandem::ops
