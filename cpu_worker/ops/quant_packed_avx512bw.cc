// The packed int8 kernel (quant_packed_kernel.inc) on AVX-512 CPUs without
// VNNI (Skylake-SP): vpdpbusd is vpmaddubsw (pairs of products to int16)
// then vpmaddwd against ones (pairs of those to int32), exactly: Q4's
// nibbles (at most 15 x 127 x 2 a pair) never reach vpmaddubsw's int16
// saturation, and Q8_0's q + 128 (up to 255) are taken as their low seven
// bits and their top bit apart (127 x 127 x 2 and 128 x 127 x 2 a pair),
// so the integer sums, and so every output, are the VNNI kernel's bits.
// Also the quantization of the activations and the dequantization of
// packed rows to f32, which both kernels share.
#include <algorithm>
#include <cstdint>

#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal::quant {
namespace {

#define TANDEM_QP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

template <DType T>
TANDEM_QP_TARGET inline __m512i DotBytes(__m512i acc, __m512i w, __m512i x) {
  const __m512i ones = _mm512_set1_epi16(1);
  if constexpr (T == DType::kQ8_0) {
    const __m512i low = _mm512_and_si512(w, _mm512_set1_epi8(0x7f));
    const __m512i top = _mm512_and_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(low, x), ones));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(top, x), ones));
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), ones));
  }
}

// vpdpbusd's stand-in above needs registers of its own (for Q8_0 three
// constants and two temporaries), so the 2 x 4 tiles serve every batch
// here; the wide ones were not measured without VNNI.
constexpr bool kWideTiles = false;

#include "cpu_worker/ops/quant_packed_kernel.inc"

template <DType T>
TANDEM_QP_TARGET void DequantPacked(const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0,
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

}  // namespace

void PackedRowsAvx512Bw(const PackedTask& t, int64_t n0, int64_t n1) {
  static const bool l2 = PackedPrefetchLevel() == PrefetchLevel::kL2;
  if (l2) return PackedRowsAt<PrefetchLevel::kL2>(t, n0, n1);
  PackedRowsAt<PrefetchLevel::kL1>(t, n0, n1);
}

// Per superblock: the blocks quantized by QuantizeBlockAvx512 into a
// block-major scratch, whose dwords are then gathered into the eight
// interleaved groups; the groups' bytes summed per lane (against ones:
// pairs of products within int16, so no VNNI is needed) are the blocks'
// sums of q.
TANDEM_QP_TARGET void PrepPackedQ8RowAvx512(const float* x, int64_t nb, ActQ8Packed* out) {
  // Dword g of block b is at scratch[8 * b + g]; group g gathers lanes b.
  const __m512i by_block =
      _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
  const __m512i ones = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
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
      sums = _mm512_add_epi32(sums, _mm512_madd_epi16(_mm512_maddubs_epi16(ones, group), ones16));
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

}  // namespace tandem::ops::internal::quant
