// Small-batch bf16 linear kernel on AVX512-BF16 dot products (vdpbf16ps):
// y[m, n] = x[m, k] · w[n, k]^T (+ bias) with the activations rounded to
// bf16, the weight read in place ([n, k] row-major, bf16) once per call,
// f32 accumulation. Internal to ops.
//
// Why a second small-batch kernel: on AMD Zen 4, vdpbf16ps retires one per
// cycle (32 bf16 multiply-adds) against one f32 FMA (16), so from about 4
// rows, where gemv.h's kernel (f32 FMAs on widened weights) is compute-
// bound, this one is 1.4-1.7x as fast, and at 32 rows 1.15x oneDNN
// (linear_bench.cc, BM_Bf16SmallBatchPaths path 4; linear.cc has figures). On Sapphire Rapids the ratio is the
// other way round (gemv.h says why), and AMX is faster still; so Linear
// uses it on AMD CPUs only (Bf16UsesDotKernel, linear.h).
//
// Batch invariance: every output element is accumulated the same way
// whatever m and the other rows are: in 16 lanes over k in order (pairs of
// k per lane and step), the tail masked, then one fixed reduction tree,
// then the bias. The tiles that group rows only decide which elements are
// computed together, and the spans that cut the loop over k (up to 24 rows,
// bf16_dot_linear.cc says why) store and reload the accumulators unchanged.
#ifndef TANDEM_CPU_WORKER_OPS_BF16_DOT_LINEAR_H_
#define TANDEM_CPU_WORKER_OPS_BF16_DOT_LINEAR_H_

#include <cstdint>

#include "common/dtype.h"

namespace tandem::ops::internal {

// The most rows Linear sends here; larger batches go to oneDNN.
constexpr int64_t kBf16DotMaxRows = 32;

// True where the kernel can run: AVX512-BF16 usable (CpuHasBf16).
bool Bf16DotKernelRuns();

// Any m, n, k > 0; x, bias and y f32 (bias may be null), w bf16. Threads
// over n with OpenMP (static schedule). Uses a thread-local copy of x in
// bf16, blocked by 32 elements (about m * k elements, grown once).
// Requires Bf16DotKernelRuns().
void Bf16DotLinear(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                   const float* bias, float* y);

// The same on GGUF blocks (Q8_0, Q4_0, Q4_1; k a multiple of 32): each work
// item dequantizes its weight rows to bf16 into a thread-local buffer (as
// the AMX kernel does) and runs the tiles on them; the results are those of
// Bf16DotLinear on the dequantized weight. Requires Bf16DotKernelRuns().
void QuantDotLinear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                    const float* bias, float* y);

// Rows [r0, r1) of x [m, k] rounded to bf16 (to nearest even) into `dst`
// in blocks of 32 elements interleaved by row: block b of row r at
// (b * m + r) * 32, the last block zero-padded (m * 32 * ((k + 31) / 32)
// elements in all). Requires Bf16DotKernelRuns().
void Bf16BlockRows(const float* x, int64_t m, int64_t k, int64_t r0, int64_t r1, uint16_t* dst);
// All m rows so, in this thread's buffer, which the caller's next parallel
// region reads; the thread's next call overwrites it.
const uint16_t* Bf16XBlocks(const float* x, int64_t m, int64_t k);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_BF16_DOT_LINEAR_H_
