// AVX512-VNNI kernel for GGUF weights packed at load (quant_packed.h says
// the layout): per superblock of 16 blocks, eight vpdpbusd leave the 16
// blocks' integer dot products one per dword lane, and one FMA scales them
// by d_w * d_x into the row's f32 accumulator (Q4_1: and a second adds
// m_w * d_x * sum of q).
#include <algorithm>
#include <cstdint>

#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal::quant {
namespace {

#define TANDEM_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// A tile is R weight rows against up to C rows of x: one row of x (or
// two) passes over each weight row alone, a sequential stream; more rows
// pass two weight rows at a time, four rows of x at a time, so that each
// load of x feeds two products. Eight rows of x against one weight row read
// the activations from L2 twice as often: on the AMD EPYC VM (4096 x 4096,
// warm, 2 threads) 16 rows ran at 340 GOPS that way and 526 in these tiles.
constexpr int kStreamMaxC = 2;
constexpr int kTileR = 2, kTileC = 4;

// A thread's rows are one stream of bytes, fetched this far ahead into L1
// by a cursor that each superblock moves on by its share of the rows, so
// that the scales and the padding at a row's end are fetched too: fetching
// the same 512 bytes 4 KiB on for each superblock left those lines to
// demand misses and read 0.70-0.75 of the sweep in BM_DecodeLayerSequence
// (Q8_0, one row, the VM's fast bandwidth phase), the cursor 0.82-0.83;
// into L2 0.77, 2 KiB ahead 0.77, 8 KiB 0.83. That VM was a Zen 5; on a
// Zen 4 one, into L2 read a third more than into L1 at one row
// (PackedPrefetchLevel picks the level by CPU family).
constexpr int64_t kAheadBytes = 4096;

TANDEM_VNNI inline __m512i LoadGroup(const uint8_t* p, __mmask16 mask, bool full) {
  return full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(mask, p);
}

// The 16 f16 values at `h` (scales or mins of a superblock's blocks; the
// `mask`ed ones of a tail) as f32.
TANDEM_VNNI inline __m512 Halves(const uint16_t* h, __mmask16 mask, bool full) {
  return _mm512_cvtph_ps(full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h))
                              : _mm256_maskz_loadu_epi16(mask, h));
}

// The unsigned weight operand of group g (0..7) of a superblock: Q8_0's
// groups are vectors of their own; Q4's group g < 4 is the low nibbles of
// vector g and group g + 4 its high nibbles.
template <DType T>
TANDEM_VNNI inline __m512i WeightGroup(const __m512i (&v)[T == DType::kQ8_0 ? 8 : 4], int g) {
  if constexpr (T == DType::kQ8_0) {
    return v[g];
  } else {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    return g < 4 ? _mm512_and_si512(v[g], nibble)
                 : _mm512_and_si512(_mm512_srli_epi16(v[g - 4], 4), nibble);
  }
}

// Superblock s (or the tail of r < 16 blocks: `full` false) of R weight
// rows `row_bytes` apart from `q` against C rows of x. One row of x against
// one weight row sums the eight products in two chains, so that its dot
// products do not wait on each other; integer sums are exact, so the
// grouping does not change the result, and every (row of x, weight row)
// pair is computed the same way in every tile shape. The chains start from
// the correction for the weights' offset: -128 * sum of q for Q8_0's
// q + 128, -8 * sum of q for Q4_0's nibbles (q - 8), none for Q4_1, whose
// m_w * d_x * sum of q is added in f32 (`ms`: the 16 blocks' m_w).
template <DType T, int R, int C>
TANDEM_VNNI inline void Superblock(const uint8_t* q, int64_t row_bytes, int64_t group_bytes,
                                   __mmask16 mask, bool full, const __m512 (&ws)[R],
                                   const __m512 (&ms)[R], const ActQ8Packed* a, int64_t stride,
                                   __m512 (&acc)[R][C]) {
  constexpr bool kTwoChains = R * C <= 2;
  __m512i dot[R][C], odd[R][C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const __m512i comp = _mm512_load_si512(a[c * stride].comp);
    const __m512i start = T == DType::kQ8_0   ? comp
                          : T == DType::kQ4_0 ? _mm512_srai_epi32(comp, 4)
                                              : _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      dot[r][c] = start;
      odd[r][c] = _mm512_setzero_si512();
    }
  }
  // Q4's vectors, kept from group g's load for group g + 4's high nibbles.
  // Each load sits next to its first use, as Q8_0's did before Q4 joined
  // (all of a superblock's loads ahead of its dot products read the same
  // within the noise: BM_DecodeLayerSequence, Q8_0, 1, 4 and 8 rows).
  __m512i v[R][4];
  const __m512i nibble = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    __m512i w[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if constexpr (T == DType::kQ8_0) {
        w[r] = LoadGroup(q + r * row_bytes + g * group_bytes, mask, full);
      } else if (g < 4) {
        v[r][g] = LoadGroup(q + r * row_bytes + g * group_bytes, mask, full);
        w[r] = _mm512_and_si512(v[r][g], nibble);
      } else {
        w[r] = _mm512_and_si512(_mm512_srli_epi16(v[r][g - 4], 4), nibble);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512i x = _mm512_load_si512(a[c * stride].q + 64 * g);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if (kTwoChains && (g & 1) != 0) {
          odd[r][c] = _mm512_dpbusd_epi32(odd[r][c], w[r], x);
        } else {
          dot[r][c] = _mm512_dpbusd_epi32(dot[r][c], w[r], x);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const __m512 dx = _mm512_load_ps(a[c * stride].dx);
    // Q4_1: d_x * sum of q, from -128 * sum of q (exact in f32: |sum| <
    // 2^12, and the scaling by 2^-7 is exact).
    __m512 sx = _mm512_setzero_ps();
    if constexpr (T == DType::kQ4_1) {
      sx = _mm512_mul_ps(
          _mm512_mul_ps(dx, _mm512_cvtepi32_ps(_mm512_load_si512(a[c * stride].comp))),
          _mm512_set1_ps(-1.0f / 128.0f));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i sum = kTwoChains ? _mm512_add_epi32(dot[r][c], odd[r][c]) : dot[r][c];
      acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws[r], dx), acc[r][c]);
      if constexpr (T == DType::kQ4_1) acc[r][c] = _mm512_fmadd_ps(ms[r], sx, acc[r][c]);
    }
  }
}

// Weight rows j .. j + R - 1 against rows i0 .. i0 + C - 1 of x. `cursor`:
// the stream's prefetch cursor (null: no prefetch, the rows are in L1
// already), `end` the weight's end.
template <DType T, int R, int C, PrefetchLevel L>
TANDEM_VNNI void Tile(const PackedTask& t, int64_t j, int64_t i0, uintptr_t* cursor,
                      uintptr_t end) {
  // LocatePacked's geometry, with the full superblocks counted once.
  const int64_t nb = t.k / kBlock;
  const int64_t full = nb / 16, r = nb % 16;
  const int64_t parts = full + (r != 0 ? 1 : 0);
  const int64_t super_bytes = 16 * PackedBlockBytes(T);
  const uint8_t* row = t.w + j * t.row_bytes;
  const ActQ8Packed* a = t.acts + i0 * t.act_stride;
  __m512 acc[R][C];
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[rr][c] = _mm512_setzero_ps();
  }
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(row) + kAheadBytes;
  const auto* scales = reinterpret_cast<const uint16_t*>(row + PackedScalesOffset(T, nb));
  const auto* mins = reinterpret_cast<const uint16_t*>(row + PackedMinsOffset(T, nb));
  for (int64_t s = 0; s < parts; ++s) {
    if (cursor != nullptr) {
      FetchLinesUpTo<L>(cursor, ahead + (s + 1) * R * t.row_bytes / parts, end);
    }
    const bool in_full = s < full;
    const auto mask = static_cast<__mmask16>(in_full ? 0xffff : (1u << r) - 1);
    __m512 ws[R], ms[R];
#pragma GCC unroll 4
    for (int rr = 0; rr < R; ++rr) {
      ws[rr] = Halves(scales + rr * t.row_bytes / 2 + 16 * s, mask, in_full);
      ms[rr] = T == DType::kQ4_1 ? Halves(mins + rr * t.row_bytes / 2 + 16 * s, mask, in_full)
                                 : _mm512_setzero_ps();
    }
    Superblock<T, R, C>(row + s * super_bytes, t.row_bytes, in_full ? 64 : 4 * r, mask, in_full, ws,
                        ms, a + s, t.act_stride, acc);
  }
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
    const float b = t.bias != nullptr ? t.bias[j + rr] : 0.0f;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      t.y[(i0 + c) * t.n + j + rr] = _mm512_reduce_add_ps(acc[rr][c]) + b;
    }
  }
}

// R weight rows from j against all m rows of x, C at a time (the rest in
// one smaller tile); only the first tile prefetches.
template <DType T, int R, int C, PrefetchLevel L>
TANDEM_VNNI void Rows(const PackedTask& t, int64_t j, uintptr_t* cursor, uintptr_t end) {
  int64_t i = 0;
  for (; i + C <= t.m; i += C) Tile<T, R, C, L>(t, j, i, i == 0 ? cursor : nullptr, end);
  uintptr_t* first = i == 0 ? cursor : nullptr;
  const int64_t rest = t.m - i;
  if constexpr (C > 3) {
    if (rest == 3) return Tile<T, R, 3, L>(t, j, i, first, end);
  }
  if constexpr (C > 2) {
    if (rest == 2) return Tile<T, R, 2, L>(t, j, i, first, end);
  }
  if constexpr (C > 1) {
    if (rest == 1) return Tile<T, R, 1, L>(t, j, i, first, end);
  }
}

template <DType T, PrefetchLevel L>
void RowsOf(const PackedTask& t, int64_t n0, int64_t n1) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(t.w) + t.n * t.row_bytes;
  // The item's first kAheadBytes are left to the hardware prefetchers.
  uintptr_t cursor = reinterpret_cast<uintptr_t>(t.w + n0 * t.row_bytes) + kAheadBytes;
  int64_t j = n0;
  if (t.m <= kStreamMaxC) {
    for (; j < n1; ++j) Rows<T, 1, kStreamMaxC, L>(t, j, &cursor, end);
    return;
  }
  for (; j + kTileR <= n1; j += kTileR) Rows<T, kTileR, kTileC, L>(t, j, &cursor, end);
  for (; j < n1; ++j) Rows<T, 1, kTileC, L>(t, j, &cursor, end);
}

// The `blocks` (<= 16) blocks of one superblock of type T, groups
// `group_bytes` apart, as 32 signed bytes each (out[b]): q for Q8_0, q - 8
// for Q4_0, q (0..15) for Q4_1. The eight groups (dword b of group t:
// elements 4t..4t+3 of block b; Q4's from the nibbles as WeightGroup takes
// them) are transposed 8 x 16 in three rounds of shuffles: pairs of groups
// interleaved by dword, then by qword (each 128-bit lane L then holds four
// groups' dwords of block 4L + p in vector p), then the two halves of each
// block joined.
template <DType T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"),
               always_inline)) inline void
TransposeSuperblock(const uint8_t* q, int64_t group_bytes, int blocks, __m256i (&out)[16]) {
  const auto mask = static_cast<__mmask16>(blocks == 16 ? 0xffff : (1u << blocks) - 1);
  constexpr int kLoads = T == DType::kQ8_0 ? 8 : 4;
  __m512i v[kLoads];
#pragma GCC unroll 8
  for (int l = 0; l < kLoads; ++l) v[l] = LoadGroup(q + l * group_bytes, mask, blocks == 16);
  // Back to signed bytes: Q8_0's q + 128 less 128, Q4_0's nibbles less 8.
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(T == DType::kQ8_0   ? 0x80
                                                            : T == DType::kQ4_0 ? 8
                                                                                : 0));
  __m512i g[8];
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) g[t] = _mm512_sub_epi8(WeightGroup<T>(v, t), offset);
  __m512i a[4][2];  // a[p][h]: groups 4h..4h+3 of blocks 4L + p
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i lo01 = _mm512_unpacklo_epi32(g[4 * h], g[4 * h + 1]);
    const __m512i hi01 = _mm512_unpackhi_epi32(g[4 * h], g[4 * h + 1]);
    const __m512i lo23 = _mm512_unpacklo_epi32(g[4 * h + 2], g[4 * h + 3]);
    const __m512i hi23 = _mm512_unpackhi_epi32(g[4 * h + 2], g[4 * h + 3]);
    a[0][h] = _mm512_unpacklo_epi64(lo01, lo23);
    a[1][h] = _mm512_unpackhi_epi64(lo01, lo23);
    a[2][h] = _mm512_unpacklo_epi64(hi01, hi23);
    a[3][h] = _mm512_unpackhi_epi64(hi01, hi23);
  }
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    // [blocks p, 4 + p] and [8 + p, 12 + p]: lanes L of the two halves side
    // by side ([h0 L0, h0 L1, h1 L0, h1 L1]), then the middle lanes swapped.
    const __m512i lo = _mm512_shuffle_i32x4(a[p][0], a[p][1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i hi = _mm512_shuffle_i32x4(a[p][0], a[p][1], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i first = _mm512_shuffle_i32x4(lo, lo, _MM_SHUFFLE(3, 1, 2, 0));
    const __m512i second = _mm512_shuffle_i32x4(hi, hi, _MM_SHUFFLE(3, 1, 2, 0));
    out[p] = _mm512_castsi512_si256(first);
    out[4 + p] = _mm512_extracti64x4_epi64(first, 1);
    out[8 + p] = _mm512_castsi512_si256(second);
    out[12 + p] = _mm512_extracti64x4_epi64(second, 1);
  }
}

// Block b's 32 values d * q (+ m), formed in f32 as ConvertToF32 forms
// them, from its signed bytes (TransposeSuperblock's out[b]) into lo
// (elements 0..15) and hi (16..31).
template <DType T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"),
               always_inline)) inline void
BlockValues(__m256i q, float d, float m, __m512& lo, __m512& hi) {
  const __m512 vd = _mm512_set1_ps(d);
  lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), vd);
  hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), vd);
  if constexpr (T == DType::kQ4_1) {
    lo = _mm512_add_ps(lo, _mm512_set1_ps(m));
    hi = _mm512_add_ps(hi, _mm512_set1_ps(m));
  }
}

template <DType T>
TANDEM_VNNI void DequantPacked(const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0,
                               int64_t rows, float* dst) {
  const int64_t nb = k / kBlock;
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* row = w + (r0 + i) * row_bytes;
    const auto* scales = reinterpret_cast<const uint16_t*>(row + PackedScalesOffset(T, nb));
    const auto* mins = reinterpret_cast<const uint16_t*>(row + PackedMinsOffset(T, nb));
    for (int64_t s = 0; s < (nb + 15) / 16; ++s) {
      const PackedSuperblock at = LocatePacked(T, nb, s);
      __m256i q[16];
      TransposeSuperblock<T>(row + at.offset, at.group_bytes, at.blocks, q);
      for (int b = 0; b < at.blocks; ++b) {
        const int64_t blk = 16 * s + b;
        __m512 lo, hi;
        BlockValues<T>(q[b], _cvtsh_ss(scales[blk]),
                       T == DType::kQ4_1 ? _cvtsh_ss(mins[blk]) : 0.0f, lo, hi);
        float* out = dst + i * k + blk * kBlock;
        _mm512_storeu_ps(out, lo);
        _mm512_storeu_ps(out + 16, hi);
      }
    }
  }
}

// The values as above rounded to nearest even by vcvtne2ps2bf16, as
// DequantBlockBf16 (dequant_bf16.h) does for blocks in place. The loop is
// the one above, repeated: this function is compiled for AVX512-BF16 and
// the f32 one must run without it (VNNI CPUs without BF16 use f32 panels),
// and GCC inlines no AVX512-BF16 code into a function compiled without it.
template <DType T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c"))) void
DequantPackedBf16(const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0, int64_t rows,
                  uint16_t* dst) {
  const int64_t nb = k / kBlock;
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* row = w + (r0 + i) * row_bytes;
    const auto* scales = reinterpret_cast<const uint16_t*>(row + PackedScalesOffset(T, nb));
    const auto* mins = reinterpret_cast<const uint16_t*>(row + PackedMinsOffset(T, nb));
    for (int64_t s = 0; s < (nb + 15) / 16; ++s) {
      const PackedSuperblock at = LocatePacked(T, nb, s);
      __m256i q[16];
      TransposeSuperblock<T>(row + at.offset, at.group_bytes, at.blocks, q);
      for (int b = 0; b < at.blocks; ++b) {
        const int64_t blk = 16 * s + b;
        __m512 lo, hi;
        BlockValues<T>(q[b], _cvtsh_ss(scales[blk]),
                       T == DType::kQ4_1 ? _cvtsh_ss(mins[blk]) : 0.0f, lo, hi);
        _mm512_storeu_si512(dst + i * k + blk * kBlock,
                            reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
      }
    }
  }
}

template <PrefetchLevel L>
void PackedRowsAt(const PackedTask& t, int64_t n0, int64_t n1) {
  switch (t.t) {
    case DType::kQ8_0:
      return RowsOf<DType::kQ8_0, L>(t, n0, n1);
    case DType::kQ4_0:
      return RowsOf<DType::kQ4_0, L>(t, n0, n1);
    case DType::kQ4_1:
      return RowsOf<DType::kQ4_1, L>(t, n0, n1);
    default:
      break;
  }
}

}  // namespace

void PackedRowsAvx512Vnni(const PackedTask& t, int64_t n0, int64_t n1) {
  static const bool l2 = PackedPrefetchLevel() == PrefetchLevel::kL2;
  if (l2) return PackedRowsAt<PrefetchLevel::kL2>(t, n0, n1);
  PackedRowsAt<PrefetchLevel::kL1>(t, n0, n1);
}

// Per superblock: the blocks quantized by QuantizeBlockAvx512 into a
// block-major scratch, whose dwords are then gathered into the eight
// interleaved groups; the groups' bytes summed per lane (vpdpbusd against
// ones) are the blocks' sums of q.
TANDEM_VNNI void PrepPackedQ8RowAvx512(const float* x, int64_t nb, ActQ8Packed* out) {
  // Dword g of block b is at scratch[8 * b + g]; group g gathers lanes b.
  const __m512i by_block =
      _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t s = 0; s < (nb + 15) / 16; ++s) {
    ActQ8Packed& a = out[s];
    const int blocks = static_cast<int>(std::min<int64_t>(16, nb - 16 * s));
    const auto lanes = static_cast<__mmask16>(blocks == 16 ? 0xffff : (1u << blocks) - 1);
    alignas(64) int32_t scratch[16 * 8];
    int32_t lane_sums[8];
    for (int b = 0; b < 16; ++b) {
      a.dx[b] = b < blocks
                    ? QuantizeBlockAvx512(x + (16 * s + b) * kBlock,
                                          reinterpret_cast<int8_t*>(scratch + 8 * b), lane_sums)
                    : 0.0f;
    }
    __m512i sums = _mm512_setzero_si512();
    for (int g = 0; g < 8; ++g) {
      const __m512i group =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes,
                                      _mm512_add_epi32(by_block, _mm512_set1_epi32(g)), scratch, 4);
      _mm512_store_si512(a.q + 64 * g, group);
      sums = _mm512_dpbusd_epi32(sums, ones, group);
    }
    _mm512_store_si512(a.comp, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-128)));
  }
}

void DequantPackedAvx512(DType t, const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0,
                         int64_t rows, float* dst) {
  switch (t) {
    case DType::kQ8_0:
      return DequantPacked<DType::kQ8_0>(w, row_bytes, k, r0, rows, dst);
    case DType::kQ4_0:
      return DequantPacked<DType::kQ4_0>(w, row_bytes, k, r0, rows, dst);
    case DType::kQ4_1:
      return DequantPacked<DType::kQ4_1>(w, row_bytes, k, r0, rows, dst);
    default:
      break;
  }
}

void DequantPackedBf16Avx512(DType t, const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0,
                             int64_t rows, uint16_t* dst) {
  switch (t) {
    case DType::kQ8_0:
      return DequantPackedBf16<DType::kQ8_0>(w, row_bytes, k, r0, rows, dst);
    case DType::kQ4_0:
      return DequantPackedBf16<DType::kQ4_0>(w, row_bytes, k, r0, rows, dst);
    case DType::kQ4_1:
      return DequantPackedBf16<DType::kQ4_1>(w, row_bytes, k, r0, rows, dst);
    default:
      break;
  }
}

}  // namespace tandem::ops::internal::quant
