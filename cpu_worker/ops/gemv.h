// Small-batch linear kernel: y[m, n] = x[m, k] · w[n, k]^T (+ bias) for a
// few rows of x, streaming each row of the row-major weight once per call.
// oneDNN 2.6's matmul repacks a `ba` (in place, [N, K] row-major) weight on
// every call, which dominates at decode batch sizes; this kernel reads the
// weight where it lies. Internal to ops.
//
// Batch invariance: the result for a row of x is bit-identical whatever
// the other rows of the call are and however many there are (Linear sends
// batches of up to SmallBatchMaxRows rows here, linear.h). Every output element is accumulated the
// same way in every code path of one instruction-set level: in vector lanes, over k in order, then
// reduced by the same fixed tree, then the bias is added; the tiles that group rows of x and of w
// only decide which elements are computed together, never how. (Different instruction-set levels
// round differently; one process uses one.)
#ifndef TANDEM_CPU_WORKER_OPS_GEMV_H_
#define TANDEM_CPU_WORKER_OPS_GEMV_H_

#include <cstdint>

namespace tandem::ops::internal {

// The element type of the weight the small-batch kernel reads: f32, or
// bf16 / f16 (raw uint16_t) widened exactly to f32 in registers.
enum class GemvWeight { kF32, kBF16, kF16 };

// `w` is [n, k] of `wt`; x, y, bias f32. bf16 and f16 weights are widened
// exactly and multiplied by the f32 activations (x is not rounded),
// accumulating in f32. Any m works: it is
// compute-bound from ~8 rows (f32 FMAs do at most 32 multiply-adds per
// cycle per core), where oneDNN's AMX GEMM is not. Threads over n with OpenMP (static schedule, so
// a call's threads split n the same way every time).
//
// The AVX-512 kernels run where MaxKernelIsa() allows (TANDEM_CPU_ISA=avx2
// or scalar rules them out), and for bf16 and f16 weights an AVX2 kernel
// where AVX2 is the best level allowed (gemv_avx2.h); `allow_avx512 =
// false` forces the portable kernel (for tests). For 16-bit weights they
// use a thread-local copy of x regrouped to match the widened registers
// (about m * k floats, grown once) and, per worker thread, a few KiB of
// scratch grown once. The two 16-bit types share one kernel: only how a
// load of weights is widened (bf16: a shift and a mask; f16: vcvtph2ps)
// and how x is regrouped to match differ.
//
// Why not AVX512-BF16's vdpbf16ps: on Sapphire Rapids it retires one per
// two cycles and occupies both FMA ports, 16 bf16 multiply-adds per cycle
// against 32 for f32 FMAs on exactly widened weights (a shift and a mask
// per 32 weights), and it would round x to bf16. On AMD Zen 4 the ratio is
// the other way round, and Linear takes bf16_dot_linear.h's kernel there.
void SmallBatchLinear(const float* x, int64_t m, const void* w, GemvWeight wt, int64_t n,
                      int64_t k, const float* bias, float* y, bool allow_avx512 = true);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_GEMV_H_
