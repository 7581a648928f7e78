// GGUF Q8_0, Q4_0 and Q4_1 weights repacked once at load for the
// AVX512-VNNI int8 kernel (the host device's own weights,
// WeightLayout::kCpuPacked, as packed bf16 is), which also runs, with the
// same bits, on AVX-512 CPUs without VNNI (quant_packed_avx512bw.cc).
//
// A GGUF Q8_0 row is blocks of an f16 scale and 32 signed bytes. Read in
// place, every pair of blocks costs the int8 kernel (quant_gemv_avx512.cc)
// two loads, an xor, a scalar load and widening of the two scales, their
// spread over 16 lanes, a dot product, a conversion and an FMA: about 16
// instructions per 68 bytes for one row of x. Packed, a superblock of 16
// blocks is eight 64-byte vectors whose dword lane b holds four bytes of
// block b (vector t: bytes 4t..4t+3 of each block), stored as q + 128 (the
// unsigned operand of vpdpbusd). Eight vpdpbusd then sum all 16 blocks'
// integer dot products at once, one per lane, and one conversion and one
// FMA with the 16 scales (d_w * d_x) finish them: about 22 instructions,
// loads included, per 544 bytes. On the AMD EPYC VM one row of x against
// a 4096 x 4096 weight in L3 ran at 142-174 GB/s against 91-109 in place,
// and 16 rows at 526 GOPS against 249 (docs/PERFORMANCE.md has the rest).
//
// Q4_0 and Q4_1 blocks hold 16 bytes of nibbles (byte j: element j in the
// low nibble, j + 16 in the high one). Packed, a superblock is four vectors
// whose dword lane b holds bytes 4t..4t+3 of block b's nibbles (vector t):
// masking the low nibbles gives the unsigned operand for elements 4t..4t+3
// (the activations' group t) and shifting the high ones down gives it for
// elements 16 + 4t.. (group t + 4), so the eight vpdpbusd of a Q8_0
// superblock run on four loads and six bit operations. The nibbles stay
// 0..15: Q4_0's -8 comes back through the activations' sums (-8 * sum of
// q), Q4_1's m as m_w * d_x * sum of q.
//
// The activations are quantized per block of 32 exactly as for the
// in-place kernel (quant_gemv.h), and interleaved the same way for every
// type.
//
// Row layout (row_bytes = PackedQuantRowBytes(t, k), a multiple of 64),
// with qb = the bytes of a block's quants (32 for Q8_0, 16 for Q4_0/Q4_1):
//   the full superblocks' bytes, 16 * qb each, in qb / 4 groups of 64;
//   the last r < 16 blocks (if k / 32 is not a multiple of 16): qb / 4
//     groups of 4r bytes, group t holding bytes 4t..4t+3 of each block;
//   the k / 32 f16 scales in block order;
//   Q4_1: the k / 32 f16 mins in block order;
//   zero padding up to the next multiple of 64.
// The integer dot products are exact and every output sums its superblocks
// in order, so a row's result does not depend on m or on the threads.
// Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_QUANT_PACKED_H_
#define TANDEM_CPU_WORKER_OPS_QUANT_PACKED_H_

#include <cstdint>

#include "common/dtype.h"

namespace tandem::ops::internal {

namespace quant {
struct ActQ8Packed;  // quant_gemv_kernels.h
}  // namespace quant

inline constexpr int64_t kQ8SuperBlock = 16;  // blocks of 32 per superblock

// True for the types the packed kernel takes: Q8_0, Q4_0 and Q4_1.
bool PacksAsQuant(DType t);

// Bytes of one packed row of k inputs (k a multiple of 32), and of n rows,
// for a type PacksAsQuant takes.
int64_t PackedQuantRowBytes(DType t, int64_t k);
int64_t PackedQuantBytes(DType t, int64_t n, int64_t k);

// True if GGUF quantized weights are packed where the caller allows it
// (WeightLayout::kCpuPacked): on CPUs with AVX-512 BW (VNNI or not) and
// without usable AMX (whose kernels read the blocks in place; not measured
// packed).
bool QuantPacksHere();

// Writes the n GGUF rows of type t at `src` (k / 32 blocks each) packed to
// `dst` (PackedQuantBytes(t, n, k) bytes, padding included), on all threads.
void PackQuant(DType t, const void* src, int64_t n, int64_t k, void* dst);

// The inverse for one row: the packed row at `packed` back to k / 32 GGUF
// blocks at `blocks`. The plain reference the tests hold the kernels to.
void UnpackQuantRow(DType t, const void* packed, int64_t k, void* blocks);

// Linear runs batches of up to this many rows on the packed int8 kernel
// (tiles of up to four weight rows and four rows of x); larger ones dequantize
// panels for oneDNN's GEMM (QuantLinearViaGemm). On the AMD EPYC VM (4096
// x 4096, 2 threads, warm) the kernel ran Q8_0's 16 and 32 rows at 526 and
// 599 GOPS, where the bf16 dot-product kernel on blocks dequantized in
// place ran 456-531 and 515 GFLOP/s.
inline constexpr int64_t kPackedQuantMaxRows = 32;

// True if Linear runs every batch on packed quantized weights through the
// int8 kernel, prefill included, not only up to kPackedQuantMaxRows rows:
// where it has VNNI. On the Zen 4 VM (bf16 GEMM 250-410 GFLOP/s, int8
// 245-375, both swinging with the VM's neighbours) a 4096 x 4096 Q8_0
// weight ran 64 rows at 285-311 GOPS on it against 185-214 GFLOP/s through
// dequantized bf16 panels and oneDNN, 512 rows at 251-296 against 180-290;
// in three alternating rounds of the synthetic models prefill ran 6-49 %
// faster (dense 512 tokens 116-179 tokens/s against 109-146, MoE 500-665
// against 430-445; docs/PERFORMANCE.md). Without VNNI the kernel emulates
// vpdpbusd in three AVX-512 BW instructions; that was not measured against
// the panels, which keep those batches.
bool PackedQuantTakesEveryBatch();

// y[m, n] = x[m, k] · W^T (+ bias[n]) on the packed [n, k] weight `w` of
// type t, with x quantized per block of 32 as QuantLinear does. Needs
// AVX-512 BW (QuantPacksHere). Any m works: past PackedQuantSliceRows(k)
// rows, in slices of that many, so that a slice's quantized activations
// (which every pair of weight rows reads in turn) stay in L2 rather than
// coming from L3 for each pair. A row's result is the same bits in any
// batch. Uses a thread-local scratch of about 1.25 * m * k bytes (a
// slice's), grown once.
void PackedQuantLinear(DType t, const float* x, int64_t m, const void* w, int64_t n, int64_t k,
                       const float* bias, float* y);
// Rows of x per slice of PackedQuantLinear: about 512 KiB of quantized
// activations, a multiple of 4 rows (the kernel's tile), at least
// kPackedQuantMaxRows.
int64_t PackedQuantSliceRows(int64_t k);

// The plain loop the kernel's activation quantization (an AVX-512 one,
// quant::PrepPackedQ8RowAvx512) is tested against: one row of x of nb
// blocks quantized per block of 32 by QuantizeBlock and interleaved as the
// packed Q8_0 weights, into (nb + 15) / 16 ActQ8Packed.
void ReferencePrepPackedQ8Row(const float* x, int64_t nb, quant::ActQ8Packed* out);

// One PackedQuantLinear's operands.
struct PackedQuantCall {
  DType t;
  const float* x;
  int64_t m;
  const void* w;
  int64_t n, k;
  const float* bias;
  float* y;
};

// The calls, each the same bits as PackedQuantLinear gives it, with all
// their rows handed out in one parallel region, and x quantized once for
// calls on the same x (m and k): a MoE decode step is many matrices of a
// few MB, and every region's start and end cost both threads.
void PackedQuantLinearGroup(const PackedQuantCall* calls, int64_t count);

// Dequantizes packed rows [r0, r0 + rows) of a [?, k] weight of type t to
// f32, or to bf16 (d * q (+ m) formed in f32 as ConvertToF32 does, then
// rounded to nearest even, as DequantRowsBf16Avx512 does for blocks in
// place); dst rows k elements apart.
void DequantPackedQuantRows(DType t, const void* w, int64_t k, int64_t r0, int64_t rows,
                            float* dst);
void DequantPackedQuantRowsBf16(DType t, const void* w, int64_t k, int64_t r0, int64_t rows,
                                uint16_t* dst);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_QUANT_PACKED_H_
