// AVX2 kernel of the flash-decoding attention (decode_attention.cc), for
// CPUs without AVX-512: the AVX-512 kernel's plan on 8-lane vectors. G <= 4
// query heads at once, so each K and V vector is loaded once for all of
// them and feeds G independent FMA chains; with the keys transposed in a
// block, dimension d of 8 keys is one vector and a head's 8 scores build up
// in its lanes with no reduction across lanes. The portable kernel, one
// head at a time, read 6 GB/s of KV on a Zen 1 VM whose memory gives 24:
// four heads' FMAs on one key vector are what make the difference there
// (docs/PERFORMANCE.md). 16 vector registers (AVX-512 has 32) bound the
// accumulators to 8 per pass: keys are scored a run at a time, and the
// score totals and the softmax state live in memory (L1) between rounds.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "cpu_worker/ops/decode_attention_kernels.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/vec_math.h"

namespace tandem::ops::internal::attention {
namespace {

#define TANDEM_AVX2 __attribute__((target("avx2,fma")))

// internal::ExpApprox, 8 lanes at a time (same constants, same rounding
// steps up to FMA contraction).
TANDEM_AVX2 inline __m256 Exp256(__m256 x) {
  // vminps/vmaxps return their second operand if either is NaN: NaN stays
  // NaN, as in ExpApprox.
  __m256 c = _mm256_min_ps(_mm256_set1_ps(88.8f), x);
  c = _mm256_max_ps(_mm256_set1_ps(-104.5f), c);
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 kn = _mm256_fmadd_ps(c, _mm256_set1_ps(1.44269504088896341f), magic);
  const __m256 fn = _mm256_sub_ps(kn, magic);
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(kn), _mm256_castps_si256(magic));
  __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(0.693359375f), c);
  r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(-2.12194440e-4f), r);
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, z, r), _mm256_set1_ps(1.0f));
  // 2^n as two normal powers of two, as in ExpApprox.
  const __m256i n1 = _mm256_srai_epi32(n, 1);
  const __m256i n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

TANDEM_AVX2 inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

TANDEM_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Partial sums per score: about 8 independent FMA chains hide the FMA
// latency (5 cycles, two pipes), and G * VN * P accumulators stay within
// the 16 registers beside the key vectors and a broadcast.
template <int G, int VN>
constexpr int PartialSums() {
  return std::max(1, 8 / (G * VN));
}

// One dimension of a run's VN key vectors (at kd) times the G heads' q at
// that dimension (qd[g]), added to a[v][g]; the next call's line of keys
// at that dimension (nkd) prefetched if kPf.
template <int G, int VN, bool kPf>
TANDEM_AVX2 __attribute__((always_inline)) inline void DotDimension(const float* qd,
                                                                    const float* kd,
                                                                    const float* nkd,
                                                                    __m256 (&a)[VN][G]) {
  if constexpr (kPf) Prefetch(nkd);
  __m256 kv[VN];
#pragma GCC unroll 2
  for (int v = 0; v < VN; ++v) kv[v] = _mm256_loadu_ps(kd + 8 * v);
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    const __m256 qg = _mm256_broadcast_ss(qd + g);
#pragma GCC unroll 2
    for (int v = 0; v < VN; ++v) a[v][g] = _mm256_fmadd_ps(qg, kv[v], a[v][g]);
  }
}

// The dimensions [d, end) of a run's keys into P interleaved partial sums,
// each from zero (dimension d + i goes to partial i % P; a tail of fewer
// than P dimensions to partial 0). q is dimension-major ([hd][G]).
template <int G, int VN, int P, bool kPf>
TANDEM_AVX2 __attribute__((always_inline)) inline void DotRound(const float* q, const float* k,
                                                                int64_t kstride, const float* nk,
                                                                int64_t d, int64_t end,
                                                                __m256 (&a)[P][VN][G]) {
#pragma GCC unroll 8
  for (int r = 0; r < P; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < VN; ++v) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) a[r][v][g] = _mm256_setzero_ps();
    }
  }
  const float* qd = q + d * G;
  const float* kd = k + d * kstride;
  const float* nkd = nk + d * kstride;
  for (; d + P <= end; d += P) {
#pragma GCC unroll 8
    for (int r = 0; r < P; ++r) {
      DotDimension<G, VN, kPf>(qd + r * G, kd + r * kstride, nkd + r * kstride, a[r]);
    }
    qd += P * G;
    kd += P * kstride;
    nkd += P * kstride;
  }
  for (; d < end; ++d) {
    DotDimension<G, VN, kPf>(qd, kd, nkd, a[0]);
    qd += G;
    kd += kstride;
    nkd += kstride;
  }
}

// Scores of one run's 8 * VN keys into p[g][p0 ..]: rounds of 8 * P
// dimensions (8 per partial sum, as the AVX-512 kernel sums them, for the
// rounding error), each round's partial sums added pairwise and then to
// the score's total in p; scaled at the end. nk: the next call's keys of
// this run's place, prefetched a line per dimension if kPf.
template <int G, int VN, bool kPf>
TANDEM_AVX2 __attribute__((always_inline)) inline void ScoreRun(const float* q, int64_t hd,
                                                                const float* k, int64_t kstride,
                                                                const float* nk, float scale,
                                                                float (*p)[kMaxTile], int64_t p0) {
  constexpr int P = PartialSums<G, VN>();
  constexpr int64_t kSpan = 8 * P;
  for (int64_t d = 0; d < hd; d += kSpan) {
    __m256 a[P][VN][G];
    DotRound<G, VN, P, kPf>(q, k, kstride, nk, d, std::min(hd, d + kSpan), a);
#pragma GCC unroll 2
    for (int v = 0; v < VN; ++v) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        __m256 s[P];
#pragma GCC unroll 8
        for (int r = 0; r < P; ++r) s[r] = a[r][v][g];
#pragma GCC unroll 4
        for (int w = 1; w < P; w *= 2) {
#pragma GCC unroll 8
          for (int r = 0; r + w < P; r += 2 * w) s[r] = _mm256_add_ps(s[r], s[r + w]);
        }
        float* out = p[g] + p0 + 8 * v;
        _mm256_store_ps(out, d == 0 ? s[0] : _mm256_add_ps(_mm256_load_ps(out), s[0]));
      }
    }
  }
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 2
    for (int v = 0; v < VN; ++v) {
      float* out = p[g] + p0 + 8 * v;
      _mm256_store_ps(out, _mm256_mul_ps(_mm256_load_ps(out), sc));
    }
  }
}

// Scores of both runs (run x's into p[g][16 x ..]), prefetching the next
// call's keys as they go. Not inlined into the tile, so that the score
// loop gets the vector registers to itself (as in the AVX-512 kernel).
template <int G>
TANDEM_AVX2 __attribute__((noinline)) void ScoreTile(const float* q, int64_t hd, const Run (&r)[2],
                                                     int64_t kstride, float scale,
                                                     float (*p)[kMaxTile], const Run (&next)[2]) {
  for (int x = 0; x < 2; ++x) {
    if (r[x].n == 0) continue;
    // An empty next run is not prefetched, and no address is formed from
    // its null pointer.
    const bool pf = next[x].n > 0;
    const float* nk = pf ? next[x].k : r[x].k;
    if (r[x].n == 16) {
      if (pf) {
        ScoreRun<G, 2, true>(q, hd, r[x].k, kstride, nk, scale, p, 16 * x);
      } else {
        ScoreRun<G, 2, false>(q, hd, r[x].k, kstride, nk, scale, p, 16 * x);
      }
    } else if (pf) {
      ScoreRun<G, 1, true>(q, hd, r[x].k, kstride, nk, scale, p, 16 * x);
    } else {
      ScoreRun<G, 1, false>(q, hd, r[x].k, kstride, nk, scale, p, 16 * x);
    }
  }
  // A next run where this tile has none, or longer than the line a
  // dimension prefetched: its remaining keys and value rows.
  for (int x = 0; x < 2; ++x) {
    const int64_t have = r[x].n > 0 ? 16 : 0;
    if (next[x].n > have) PrefetchKeys(next[x].k + have, kstride, hd, next[x].n - have);
    for (int64_t j = r[x].n; j < next[x].n; ++j) PrefetchRow(next[x].v + j * hd, hd);
  }
}

// Online softmax over the tile's scores: p becomes exp(s - m_new), each
// head's m and l are updated and corr[g] = exp(m_old - m_new) is what its
// accumulator must be scaled by. Past the first tiles the maximum seldom
// moves: a compare against it finds the tiles where it does, and only
// those take the maximum and the scalar exp. A NaN score compares false,
// gives p = NaN and poisons the output.
template <int G>
TANDEM_AVX2 inline void SoftmaxTile(int64_t hd, const Run (&r)[2], float (*p)[kMaxTile],
                                    float* state, int64_t sd, float* corr) {
  int64_t at[4];
  int nv = 0;
  for (int x = 0; x < 2; ++x) {
    for (int64_t j = 0; j < r[x].n; j += 8) at[nv++] = 16 * x + j;
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    float* st = state + g * sd;
    const float m_old = st[hd];
    const __m256 mo = _mm256_set1_ps(m_old);
    __m256 s[4];
    __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int above = 0;
    for (int i = 0; i < nv; ++i) {
      s[i] = _mm256_load_ps(p[g] + at[i]);
      mx = _mm256_max_ps(mx, s[i]);
      above |= _mm256_movemask_ps(_mm256_cmp_ps(s[i], mo, _CMP_GT_OQ));
    }
    corr[g] = 1.0f;
    if (above != 0) {
      const float m_new = HorizontalMax(mx);
      // exp(-inf) = 0 on the first tile: acc and l start at zero anyway.
      corr[g] = ExpApprox(m_old - m_new);
      st[hd] = m_new;
    }
    const __m256 mn = _mm256_set1_ps(st[hd]);
    __m256 sum = _mm256_setzero_ps();
    for (int i = 0; i < nv; ++i) {
      const __m256 e = Exp256(_mm256_sub_ps(s[i], mn));
      _mm256_store_ps(p[g] + at[i], e);
      sum = _mm256_add_ps(sum, e);
    }
    st[hd + 1] = st[hd + 1] * corr[g] + HorizontalSum(sum);
  }
}

// acc[g, d .. d + 8C) = acc * corr[g] + sum_j p[g][j] v[j, d .. d + 8C)
// over both runs: the G * C accumulators stay in registers across the
// tile's value rows and each broadcast p[g][j] serves C vectors. The next
// call's value rows are prefetched at every other vector (a line for each
// line loaded; at C = 3 some lines twice).
template <int G, int C>
TANDEM_AVX2 __attribute__((always_inline)) inline void PvStep(const float (*p)[kMaxTile],
                                                              const float* corr, const Run (&r)[2],
                                                              int64_t hd, int64_t d, float* state,
                                                              int64_t sd, const Run (&next)[2]) {
  __m256 a[C][G];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      a[c][g] = _mm256_mul_ps(_mm256_loadu_ps(state + g * sd + d + 8 * c),
                              _mm256_set1_ps(corr[g]));
    }
  }
  for (int x = 0; x < 2; ++x) {
    const float* v = r[x].v + d;
    const int64_t pf = std::min(r[x].n, next[x].n);
    // No address is formed from an empty next run's null pointer.
    const float* pv = pf > 0 ? next[x].v + d : v;
    for (int64_t j = 0; j < r[x].n; ++j) {
      __m256 vv[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        if (c % 2 == 0 && j < pf) Prefetch(pv + j * hd + 8 * c);
        vv[c] = _mm256_loadu_ps(v + j * hd + 8 * c);
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m256 pg = _mm256_broadcast_ss(&p[g][16 * x + j]);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) a[c][g] = _mm256_fmadd_ps(pg, vv[c], a[c][g]);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(state + g * sd + d + 8 * c, a[c][g]);
  }
}

// acc = acc * corr + p · V over the tile, C column vectors at a time: 3
// at G = 3, 4 (at 4: 12 accumulators, 3 value vectors and a broadcast, all
// 16 registers; 2 columns read 5-10% slower on the Zen 1 VM), 4 below.
template <int G>
TANDEM_AVX2 __attribute__((noinline)) void PvTile(const float (*p)[kMaxTile], const float* corr,
                                                  int64_t hd, const Run (&r)[2], float* state,
                                                  int64_t sd, const Run (&next)[2]) {
  constexpr int C = G <= 2 ? 4 : 3;
  int64_t d = 0;
  for (; d + 8 * C <= hd; d += 8 * C) PvStep<G, C>(p, corr, r, hd, d, state, sd, next);
  for (; d < hd; d += 8) PvStep<G, 1>(p, corr, r, hd, d, state, sd, next);
}

template <int G>
TANDEM_AVX2 void TileAvx2G(const float* q, int64_t hd, const Run (&r)[2], int64_t kstride,
                           float scale, float* state, int64_t sd, const Run (&next)[2]) {
  alignas(32) float p[G][kMaxTile];
  float corr[G];
  ScoreTile<G>(q, hd, r, kstride, scale, p, next);
  SoftmaxTile<G>(hd, r, p, state, sd, corr);
  PvTile<G>(p, corr, hd, r, state, sd, next);
}

// Four heads' 8 dimensions (rows q, q + hd, .., q + 3 hd) into
// out[d * 4 + g]: unpacks pair the heads per dimension, shuffles make
// quadruples (dimensions i and i + 4 in the two 128-bit lanes), and lane
// permutes put the dimensions in order.
TANDEM_AVX2 inline void Transpose4x8(const float* q, int64_t hd, float* out) {
  const __m256 a = _mm256_loadu_ps(q), b = _mm256_loadu_ps(q + hd);
  const __m256 c = _mm256_loadu_ps(q + 2 * hd), e = _mm256_loadu_ps(q + 3 * hd);
  const __m256 ab_lo = _mm256_unpacklo_ps(a, b), ab_hi = _mm256_unpackhi_ps(a, b);
  const __m256 ce_lo = _mm256_unpacklo_ps(c, e), ce_hi = _mm256_unpackhi_ps(c, e);
  // u_i: dimension i in the low lane, i + 4 in the high one.
  const __m256 u0 = _mm256_shuffle_ps(ab_lo, ce_lo, 0x44);
  const __m256 u1 = _mm256_shuffle_ps(ab_lo, ce_lo, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(ab_hi, ce_hi, 0x44);
  const __m256 u3 = _mm256_shuffle_ps(ab_hi, ce_hi, 0xEE);
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(u0, u1, 0x20));
  _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(u2, u3, 0x20));
  _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(u2, u3, 0x31));
}

}  // namespace

TANDEM_AVX2 void QueryByDimensionAvx2(const float* q, int64_t kv_heads, int64_t group,
                                      int64_t hd, float* out) {
  for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
    for (int64_t g0 = 0; g0 < group; g0 += 4) {
      const int64_t n = std::min<int64_t>(4, group - g0);
      const float* src = q + (kvh * group + g0) * hd;
      float* dst = out + (kvh * group + g0) * hd;
      int64_t d = 0;
      if (n == 4) {
        for (; d + 8 <= hd; d += 8) Transpose4x8(src + d, hd, dst + d * 4);
      }
      for (; d < hd; ++d) {
        for (int64_t g = 0; g < n; ++g) dst[d * n + g] = src[g * hd + d];
      }
    }
  }
}

TANDEM_AVX2 void TileAvx2(const float* q, int64_t group, int64_t hd, const Run (&r)[2],
                          int64_t kstride, float scale, float* state, int64_t sd,
                          const Run (&next)[2]) {
  const Run none[2];
  for (int64_t g0 = 0; g0 < group; g0 += 4) {
    const float* qg = q + g0 * hd;
    float* st = state + g0 * sd;
    // Slices after the first find the tile in L1 or L2: nothing more to
    // prefetch.
    const Run (&nx)[2] = g0 == 0 ? next : none;
    switch (std::min<int64_t>(4, group - g0)) {
      case 1:
        TileAvx2G<1>(qg, hd, r, kstride, scale, st, sd, nx);
        break;
      case 2:
        TileAvx2G<2>(qg, hd, r, kstride, scale, st, sd, nx);
        break;
      case 3:
        TileAvx2G<3>(qg, hd, r, kstride, scale, st, sd, nx);
        break;
      default:
        TileAvx2G<4>(qg, hd, r, kstride, scale, st, sd, nx);
        break;
    }
  }
}

}  // namespace tandem::ops::internal::attention
