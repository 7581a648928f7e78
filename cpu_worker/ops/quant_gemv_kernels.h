// Shared between quant_gemv.cc (activation quantization, threading) and the
// per-ISA kernel files: the layouts of the quantized activations and the
// kernels' entry points. Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_QUANT_GEMV_KERNELS_H_
#define TANDEM_CPU_WORKER_OPS_QUANT_GEMV_KERNELS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/dtype.h"

namespace tandem::ops::internal::quant {

inline constexpr int kBlock = 32;

// Quantizes one block of 32 activations: returns d; q = round(x / d) with
// ties to even, |q| <= 127. Every kernel's activations come from here.
inline float QuantizeBlock(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const float r = std::nearbyint(x[j] * id);
    q[j] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
  return d;
}

// QuantizeBlock on 16 and on 8 lanes (quantize_block_simd.cc; the same d
// and q bits), also writing the sums of q[4l .. 4l + 3] for the block's
// eight dword lanes l, from which every layout's correction terms come.
float QuantizeBlockAvx512(const float* x, int8_t* q, int32_t* lane_sums);
float QuantizeBlockAvx2(const float* x, int8_t* q, int32_t* lane_sums);

// Per row of x and per pair of blocks (2p, 2p + 1), for the AVX-512 kernel.
// `q` holds the two blocks in the byte order in which the kernel unpacks the
// weights: Q8_0 [b0 0..31 | b1 0..31]; Q4_0/Q4_1 [b0 0..15 | b1 0..15 |
// b0 16..31 | b1 16..31] (low nibbles, then high nibbles). Dword lane L
// covers q[4L .. 4L+3]; `xs` and `c` are per lane. A missing second block
// (odd block count) is all zero.
struct alignas(64) Act512 {
  int8_t q[64];
  float xs[16];  // d_x of the lane's block
  union {
    int32_t i[16];  // Q8_0: -128 * lane sum of q; Q4_0: -8 * lane sum of q
    float f[16];    // Q4_1: d_x * lane sum of q
  } c;
};
static_assert(sizeof(Act512) == 192);

// Per row of x and per block, for the AVX2 kernel: q in element order, dword
// lane L covers elements 4L .. 4L+3.
struct alignas(16) Act256 {
  int8_t q[32];
  union {
    int32_t i[8];  // Q4_0: -8 * lane sum of q; Q8_0: unused (zero)
    float f[8];    // Q4_1: d_x * lane sum of q
  } c;
  float xs;  // d_x
  float pad[3];
};
static_assert(sizeof(Act256) == 80);

// Per row of x and per block, for the portable kernel.
struct ActScalar {
  int8_t q[32];
  float xs;     // d_x
  int32_t sum;  // sum of q
};
static_assert(sizeof(ActScalar) == 40);

// One call's operands. `acts` points at m rows of `groups` Act* each
// (`groups` is blocks, or pairs of blocks for Act512), rows `act_stride`
// groups apart.
struct Task {
  const uint8_t* w;  // [n] rows of row_bytes
  int64_t row_bytes;
  DType t;
  int64_t m, n, k;
  const void* acts;
  int64_t groups;
  int64_t act_stride;
  bool odd_blocks;  // k / 32 is odd (Act512: the last pair has one block)
  const float* bias;
  float* y;  // [m, n]
};

// Up to this many rows of x, RowsAvx512Vnni reads each weight row alone,
// one stream with the rows after it (stream_prefetch.h), so its callers
// hand it items of StreamItemRows.
inline constexpr int64_t kAvx512StreamMaxRows = 2;

// Per row of x and per superblock of 16 blocks, for the packed kernel
// (quant_packed.h): q interleaved as packed Q8_0 weights are (bytes
// 4t..4t+3 of block b at 64t + 4b), the blocks' -128 * sum of q and d_x per
// lane. Lanes of blocks past the row's end are zero.
struct alignas(64) ActQ8Packed {
  int8_t q[512];
  int32_t comp[16];
  float dx[16];
};
static_assert(sizeof(ActQ8Packed) == 640);

// Bytes of one block's quants in a packed row of type t: 32 for Q8_0, 16
// (nibbles) for Q4_0 and Q4_1.
inline int64_t PackedBlockBytes(DType t) { return t == DType::kQ8_0 ? 32 : 16; }

// Where the parts of a packed row of nb blocks lie (quant_packed.h):
// superblock s's bytes begin at `offset`, its PackedBlockBytes / 4 groups
// `group_bytes` apart (4 bytes per block), and it holds `blocks` blocks
// (16, or fewer in the last); the f16 scales follow all of them, at
// PackedScalesOffset, and Q4_1's f16 mins the scales.
struct PackedSuperblock {
  int64_t offset, group_bytes;
  int blocks;
};
inline PackedSuperblock LocatePacked(DType t, int64_t nb, int64_t s) {
  const int64_t blocks = nb - 16 * s < 16 ? nb - 16 * s : 16;
  return {s * 16 * PackedBlockBytes(t), 4 * blocks, static_cast<int>(blocks)};
}
inline int64_t PackedScalesOffset(DType t, int64_t nb) { return PackedBlockBytes(t) * nb; }
inline int64_t PackedMinsOffset(DType t, int64_t nb) { return (PackedBlockBytes(t) + 2) * nb; }

// One call of the packed kernel: `acts` holds m rows of act_stride
// superblocks.
struct PackedTask {
  DType t;
  const uint8_t* w;  // [n] packed rows of row_bytes
  int64_t row_bytes;
  int64_t m, n, k;
  const ActQ8Packed* acts;
  int64_t act_stride;
  const float* bias;
  float* y;  // [m, n]
};

// Output columns [n0, n1) for all m rows, on the packed weight: with
// vpdpbusd (AVX512-VNNI), or its exact equivalent in AVX-512 BW (the same
// bits, quant_packed_avx512bw.cc).
void PackedRowsAvx512Vnni(const PackedTask& t, int64_t n0, int64_t n1);
void PackedRowsAvx512Bw(const PackedTask& t, int64_t n0, int64_t n1);
// One row of x of nb blocks into (nb + 15) / 16 ActQ8Packed: the same bits
// as QuantizeBlock per block, sixteen lanes at a time (AVX-512 BW).
void PrepPackedQ8RowAvx512(const float* x, int64_t nb, ActQ8Packed* out);
// Packed rows [r0, r0 + rows) of type t dequantized to f32 (AVX-512 BW) or
// bf16 (AVX512-BF16) (dst rows k apart).
void DequantPackedAvx512(DType t, const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0,
                         int64_t rows, float* dst);
void DequantPackedBf16Avx512(DType t, const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0,
                             int64_t rows, uint16_t* dst);

// Output columns (weight rows) [n0, n1) for all m rows.
void RowsAvx512Vnni(const Task& t, int64_t n0, int64_t n1);
void RowsAvx2(const Task& t, int64_t n0, int64_t n1);
void RowsScalar(const Task& t, int64_t n0, int64_t n1);

// Dequantizes `rows` rows (row_bytes apart, k elements each) to bf16
// (AVX512-BF16: d * q is exact in f32, then rounded to nearest even) or
// to f32 (AVX2), dst rows k elements apart.
void DequantRowsBf16Avx512(DType t, const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t k,
                           uint16_t* dst);
void DequantRowsF32Avx2(DType t, const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t k,
                        float* dst);

}  // namespace tandem::ops::internal::quant

#endif  // TANDEM_CPU_WORKER_OPS_QUANT_GEMV_KERNELS_H_
