// Decode-batch linear layers on AMX tiles: y[m, n] = x[m, k] · w[n, k]^T
// (+ bias) for bf16 weights read in place and up to kAmxMaxRows rows of x.
//
// Why a kernel of our own: a decode step at batch 5-32 reads each weight
// once and does 2·m FLOPs per weight, which AMX does with room to spare
// (tdpbf16ps: 16 x 16 x 32 multiply-adds per instruction), so the step is
// bound by reading the weights if the weights are read once, where they
// lie. oneDNN 2.6 either repacks an in-place [N, K] weight on every call or,
// with the weight as its source operand, splits the work in its own way;
// here a tile of 16 weight rows is the A operand as it lies in memory (row
// stride K), and the activations are packed once per call into the B
// operand's pair-interleaved layout.
//
// GGUF block-quantized weights (Q8_0, Q4_0, Q4_1) run on int8 tiles
// (AmxQuantInt8Linear: one block of k per tile multiply, the integer sums
// scaled by the blocks' scales on the vector unit; Q8_0's quants are the A
// tile where they lie), or, where only AMX-BF16 is usable, on rows
// dequantized to bf16 (AmxQuantLinear), which reads them slower (linear.h,
// QuantUsesAmxKernel).
//
// Numerics (bf16): x is rounded to bf16 (round to nearest even), products are
// exact in f32 and accumulated in f32 by the tile unit, 32 k-elements per
// instruction, k-blocks in order. Every output element is computed the same
// way whatever the other rows of x and however many (1 to kAmxMaxRows): a
// row's result does not depend on its batch.
//
// Use: only where AmxUsable() — the CPU lists AMX-BF16, the OS saves tile
// state, the kernel granted this process the tile data permission, and a
// probe tile multiply ran in a child process and gave the right answer. On
// some virtual machines AMX is listed but faults; the probe keeps that to
// the child. TANDEM_CPU_ISA (avx2, scalar, f32) rules AMX out too.
#ifndef TANDEM_CPU_WORKER_OPS_AMX_LINEAR_H_
#define TANDEM_CPU_WORKER_OPS_AMX_LINEAR_H_

#include <cstdint>

#include "common/dtype.h"

namespace tandem::ops::internal {

// The most rows of x one call takes (two 16-column B tiles).
inline constexpr int64_t kAmxMaxRows = 32;

// Probed once (see above); false on CPUs without AMX.
bool AmxUsable();
// AmxUsable(), the CPU lists AMX-INT8, and a probe int8 tile multiply ran
// in a child process and gave the right answer.
bool AmxInt8Usable();

// True if the shape suits the kernel: k a whole number of 32-element tile
// blocks, 1 <= m <= kAmxMaxRows.
bool AmxLinearFits(int64_t m, int64_t k);

// `w` is [n, k] bf16 (raw uint16_t), row-major, read in place; x, y, bias
// f32 (bias may be null). Requires AmxUsable() and AmxLinearFits(m, k).
// Threads over n with OpenMP (static schedule). Uses a thread-local packed
// copy of x (m·k bf16, grown once) and a few KiB of scratch per thread.
void AmxLinear(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k,
               const float* bias, float* y);

// The same for GGUF block-quantized weights (`w`: n rows of k / 32 blocks
// of `t`, kQ8_0, kQ4_0 or kQ4_1): each thread dequantizes an item's 32
// weight rows to bf16 into a buffer of its own (d * q is exact in f32,
// then rounded to nearest even, as QuantLinearViaGemm's panels are) and
// runs the tiles on it while it is in L2, so the weights are read once, as
// blocks, and the step stays bound by reading them: the dequantization
// costs about as much per byte as DRAM does to deliver it. Numerics as
// above, with the weights as dequantized and rounded; a row's result does
// not depend on its batch either.
void AmxQuantLinear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                    const float* bias, float* y);

// The same weights on int8 tiles, nothing dequantized: each row of x is
// quantized to int8 per block of 32 as the int8 kernels do (quant_gemv.h),
// the tile unit forms each block's integer dot products (exact), and they
// are scaled by d_w * d_x and accumulated in f32 block by block, so the
// result is x_hat · W_deq^T up to that f32 rounding, as QuantLinear's is.
// A row's result does not depend on its batch. Requires AmxInt8Usable()
// and AmxLinearFits(m, k).
void AmxQuantInt8Linear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                        const float* bias, float* y);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_AMX_LINEAR_H_
