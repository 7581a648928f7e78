// AVX512-VNNI kernel for quantized linear layers: two 32-element blocks per
// 512-bit register. Weights are made the unsigned operand of vpdpbusd —
// Q4 nibbles as they are (0..15), Q8_0 bytes xor 0x80 (q + 128) — and the
// offset (-8 resp. -128 times the activations' sum) is the accumulator's
// starting value, precomputed per lane with the activations, so the integer
// dot product is exact and costs one instruction per 64 weights.
#include "cpu_worker/ops/quant_gemv_kernels.h"

#include <algorithm>

#include "common/quant.h"
#include "cpu_worker/ops/dequant_bf16.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal::quant {
namespace {

#define TANDEM_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// Software prefetch, into the level L of the kernels' template argument
// (stream_prefetch.h): each step fetches the same bytes of the row
// AheadRows() further on, at least kAheadTiles tiles (kAheadTiles * R rows). With R rows streamed
// at once the hardware prefetchers alone left a cold (DRAM) pass ~20%
// slower in linear_bench; fetching 512 bytes ahead in the same row made up
// for it on an Emerald Rapids VM. On a Zen 4 VM the rows two tiles ahead
// (a whole tile's pages opened early instead of the next lines of pages
// already streaming) read Q4_0 at 25-27 GB/s against 19-20 at one row, and
// Q4_0 and Q8_0 15-30% faster at four rows; Q8_0 at one row stayed at
// 25-29 either way (alternating linear_bench runs, docs/PERFORMANCE.md).
constexpr int64_t kAheadTiles = 2;

// Lane pattern of a pair's two blocks (see Act512) and where in Act512::xs
// the two blocks' d_x stand side by side ([d_x0, d_x1, ...]).
template <DType T>
TANDEM_VNNI inline __m512i PairIdx() {
  return T == DType::kQ8_0 ? _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
                           : _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
}
template <DType T>
inline constexpr int kXsPair = T == DType::kQ8_0 ? 7 : 3;

// Two values (lanes 0, 1 of `f`) spread over the lanes of their blocks.
template <DType T>
TANDEM_VNNI inline __m512 Spread(__m128 f) {
  return _mm512_permutexvar_ps(PairIdx<T>(), _mm512_castps128_ps512(f));
}

TANDEM_VNNI inline __m128 HalfPair(uint16_t h0, uint16_t h1) {
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (uint32_t{h1} << 16))));
}

// One pair of weight blocks of one row: unsigned bytes, the two scales and
// (Q4_1) the two mins in lanes 0, 1. `kSingle`: only the first block exists.
template <DType T, bool kSingle>
TANDEM_VNNI inline void LoadPair(const uint8_t* row, int64_t pair, __m512i& wv, __m128& d,
                                 __m128& m) {
  if constexpr (T == DType::kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + 2 * pair;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs));
    const __m256i hi = kSingle ? _mm256_setzero_si256()
                               : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs));
    wv = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
    d = HalfPair(b[0].d, kSingle ? 0 : b[1].d);
  } else {
    const auto* b = reinterpret_cast<const QuantBlock<T>*>(row) + 2 * pair;
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs));
    const __m128i hi =
        kSingle ? _mm_setzero_si128() : _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    const __m512i v =
        _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
    wv = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
    d = HalfPair(b[0].d, kSingle ? 0 : b[1].d);
    if constexpr (T == DType::kQ4_1) m = HalfPair(b[0].m, kSingle ? 0 : b[1].m);
  }
}

// acc[r][c] += pair `g` of weight row j0 + r times pair `g` of x row i0 + c.
// Rows ahead that a tile of R rows prefetches: two tiles, and for rows
// shorter than 4 KiB (Q8_0 at k = 2048 is 2176 bytes, Q4_0 1152) as many
// whole tiles as make ~128 KiB, since two tiles of short rows are fetched
// too late to hide DRAM. Cold linear_bench at k = 2048, 2 threads,
// alternating runs: Q8_0 one row 26.7-28.8 -> 29.4-30.2 GB/s (sweep 31-32),
// four rows 18.0-18.6 -> 21.7-21.9, Q4_0 one row 19.6-24.3 -> 27.5; at
// k = 4096 no change, at k = 5632 (5984-byte rows) three tiles read ~5%
// less than two, so long rows keep two.
constexpr int64_t kShortRowBytes = 4096;
constexpr int64_t kShortRowAheadBytes = 128 * 1024;

template <int R>
inline int64_t AheadRows(int64_t row_bytes) {
  if (row_bytes >= kShortRowBytes) return kAheadTiles * R;
  const int64_t tile_bytes = R * row_bytes;
  return std::max<int64_t>(kAheadTiles, (kShortRowAheadBytes + tile_bytes - 1) / tile_bytes) * R;
}

template <DType T, int R, int C, bool kSingle, PrefetchLevel L>
TANDEM_VNNI inline void Step(const Task& t, const Act512* a0, int64_t j0, int64_t g,
                             __m512 (&acc)[R][C], int64_t ahead) {
  __m512i wv[R];
  __m128 d[R], m[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const uint8_t* row = t.w + (j0 + r) * t.row_bytes;
    if (j0 + ahead + r < t.n) {
      PrefetchLine<L>(row + ahead * t.row_bytes + g * 2 * sizeof(QuantBlock<T>));
    }
    LoadPair<T, kSingle>(row, g, wv[r], d[r], m[r]);
  }
  // d_w * d_x per lane: for one row of x, the two products are formed
  // before spreading (one 128-bit multiply); for several, d_w is spread once
  // and multiplied per row.
  __m512 ws[R];
  if constexpr (C > 1) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) ws[r] = Spread<T>(d[r]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const Act512* a = a0 + c * t.act_stride + g;
    const __m512i q = _mm512_load_si512(a->q);
    __m512 s[R];
    if constexpr (C == 1) {
      const __m128 xs2 = _mm_loadu_ps(a->xs + kXsPair<T>);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r] = Spread<T>(_mm_mul_ps(d[r], xs2));
    } else {
      const __m512 xs = _mm512_load_ps(a->xs);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r] = _mm512_mul_ps(ws[r], xs);
    }
    if constexpr (T == DType::kQ4_1) {
      const __m512 cf = _mm512_load_ps(a->c.f);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], q);
        const __m512 u =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s[r], _mm512_mul_ps(Spread<T>(m[r]), cf));
        acc[r][c] = _mm512_add_ps(acc[r][c], u);
      }
    } else {
      const __m512i ci = _mm512_load_si512(a->c.i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512i dot = _mm512_dpbusd_epi32(ci, wv[r], q);
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s[r], acc[r][c]);
      }
    }
  }
}

// R weight rows from j0 against C rows of x from i0, over all of k; each
// step fetches the same bytes `ahead` rows on.
template <DType T, int R, int C, PrefetchLevel L>
TANDEM_VNNI void Tile(const Task& t, int64_t j0, int64_t i0, int64_t ahead) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const Act512* a0 = static_cast<const Act512*>(t.acts) + i0 * t.act_stride;
  const int64_t full = t.groups - (t.odd_blocks ? 1 : 0);
  for (int64_t g = 0; g < full; ++g) Step<T, R, C, false, L>(t, a0, j0, g, acc, ahead);
  if (t.odd_blocks) Step<T, R, C, true, L>(t, a0, j0, full, acc, ahead);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float b = t.bias != nullptr ? t.bias[j0 + r] : 0.0f;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) t.y[(i0 + c) * t.n + j0 + r] = _mm512_reduce_add_ps(acc[r][c]) + b;
  }
}

// R weight rows from j0 against all m rows of x, C at a time: the R rows
// (a few KiB) stay in L1 while the rows of x pass.
template <DType T, int R, PrefetchLevel L>
TANDEM_VNNI void RowGroup(const Task& t, int64_t j0, int64_t ahead) {
  int64_t i = 0;
  for (; i + 4 <= t.m; i += 4) Tile<T, R, 4, L>(t, j0, i, ahead);
  switch (t.m - i) {
    case 3:
      Tile<T, R, 3, L>(t, j0, i, ahead);
      break;
    case 2:
      Tile<T, R, 2, L>(t, j0, i, ahead);
      break;
    case 1:
      Tile<T, R, 1, L>(t, j0, i, ahead);
      break;
    default:
      break;
  }
}

// One or two rows of x read each weight row alone, one stream with the rows
// after it (stream_prefetch.h), fetched kStreamAheadBytes ahead. Before,
// eight weight rows at a time (eight streams a row apart) read Q8_0 at 0.70
// of the read sweep beside it at one row (BM_DecodeLayerSequence, AMD EPYC
// VM), and four at a time 29-30 GB/s at two rows against 39-42 now; at four
// rows of x a weight row alone read 23-24 GB/s against 26-28 for four
// (compute: its conversions are no longer shared), at eight 11.5 against
// 17-20. For 3-4 rows of x, four weight rows at a time read 15-28% more
// than two (BM_QuantSmallBatchPaths, Q8_0, cold, 2 threads: 18.5 -> 21.3
// GB/s at 2 rows, 14.4 -> 18.5 at 4). Up to kFewMaxRows rows of x (every batch the
// int8 path takes) the four weight rows pass them four at a time: at 8 rows
// on the AMD EPYC VM (BM_Linear, 4096 x 4096, alternating) Q8_0 ran
// 167-180 -> 221-243 GFLOP/s warm and 147-159 -> 183-199 cold, Q4_0
// 166-189 -> 224-232 cold, Q4_1 the same within the noise; two weight rows
// remain for more rows of x.
constexpr int kRFew = 4;
constexpr int64_t kFewMaxRows = 8;

template <DType T, PrefetchLevel L>
TANDEM_VNNI void Rows(const Task& t, int64_t n0, int64_t n1) {
  int64_t j = n0;
  if (t.m <= kAvx512StreamMaxRows) {
    const int64_t ahead = (kStreamAheadBytes + t.row_bytes - 1) / t.row_bytes;
    for (; j < n1; ++j) RowGroup<T, 1, L>(t, j, ahead);
    return;
  }
  if (t.m <= kFewMaxRows) {
    const int64_t ahead = AheadRows<kRFew>(t.row_bytes);
    for (; j + kRFew <= n1; j += kRFew) RowGroup<T, kRFew, L>(t, j, ahead);
  } else {
    for (; j + 2 <= n1; j += 2) RowGroup<T, 2, L>(t, j, AheadRows<2>(t.row_bytes));
  }
  for (; j < n1; ++j) RowGroup<T, 1, L>(t, j, AheadRows<1>(t.row_bytes));
}

#define TANDEM_AVX512BF16 __attribute__((target(TANDEM_DEQUANT_BF16_TARGET)))

template <DType T>
TANDEM_AVX512BF16 void DequantBf16(const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t k,
                                   uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const QuantBlock<T>*>(src + r * row_bytes);
    uint16_t* out = dst + r * k;
    for (int64_t i = 0; i < k / kBlock; ++i, ++b, out += kBlock) DequantBlockBf16<T>(b, out);
  }
}

template <PrefetchLevel L>
void RowsAt(const Task& t, int64_t n0, int64_t n1) {
  switch (t.t) {
    case DType::kQ8_0:
      return Rows<DType::kQ8_0, L>(t, n0, n1);
    case DType::kQ4_0:
      return Rows<DType::kQ4_0, L>(t, n0, n1);
    case DType::kQ4_1:
      return Rows<DType::kQ4_1, L>(t, n0, n1);
    default:
      break;
  }
}

}  // namespace

void DequantRowsBf16Avx512(DType t, const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t k,
                           uint16_t* dst) {
  switch (t) {
    case DType::kQ8_0:
      return DequantBf16<DType::kQ8_0>(src, row_bytes, rows, k, dst);
    case DType::kQ4_0:
      return DequantBf16<DType::kQ4_0>(src, row_bytes, rows, k, dst);
    case DType::kQ4_1:
      return DequantBf16<DType::kQ4_1>(src, row_bytes, rows, k, dst);
    default:
      break;
  }
}

void RowsAvx512Vnni(const Task& t, int64_t n0, int64_t n1) {
  static const bool l2 = StreamPrefetchLevel() == PrefetchLevel::kL2;
  if (l2) return RowsAt<PrefetchLevel::kL2>(t, n0, n1);
  RowsAt<PrefetchLevel::kL1>(t, n0, n1);
}

}  // namespace tandem::ops::internal::quant
