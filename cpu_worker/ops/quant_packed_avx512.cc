// The packed int8 kernel (quant_packed_kernel.inc) on AVX512-VNNI: per
// superblock of 16 blocks, eight vpdpbusd leave the 16 blocks' integer dot
// products one per dword lane, and one FMA scales them by d_w * d_x into
// the row's f32 accumulator (Q4_1: and a second adds m_w * d_x * sum of
// q). Also the dequantization of packed rows to bf16 (AVX512-BF16 CPUs all
// have VNNI).
#include <algorithm>
#include <cstdint>

#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal::quant {
namespace {

#define TANDEM_QP_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

template <DType T>
TANDEM_QP_TARGET inline __m512i DotBytes(__m512i acc, __m512i w, __m512i x) {
  return _mm512_dpbusd_epi32(acc, w, x);
}

// Tiles of four weight rows against three rows of x from five rows of x
// (quant_packed_kernel.inc says why).
constexpr bool kWideTiles = true;

#include "cpu_worker/ops/quant_packed_kernel.inc"

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

}  // namespace

void PackedRowsAvx512Vnni(const PackedTask& t, int64_t n0, int64_t n1) {
  static const bool l2 = PackedPrefetchLevel() == PrefetchLevel::kL2;
  if (l2) return PackedRowsAt<PrefetchLevel::kL2>(t, n0, n1);
  PackedRowsAt<PrefetchLevel::kL1>(t, n0, n1);
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
