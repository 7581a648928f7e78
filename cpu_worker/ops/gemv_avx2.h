// The small-batch kernel's AVX2 path for bf16 and f16 weights (gemv.h's
// SmallBatchLinear takes it where AVX2 is the best level allowed): the
// weights widened exactly in registers (bf16: a shift and a mask; f16:
// F16C's vcvtph2ps) and multiplied by the f32 activations. Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_GEMV_AVX2_H_
#define TANDEM_CPU_WORKER_OPS_GEMV_AVX2_H_

#include <cstdint>

#include "cpu_worker/ops/gemv.h"

namespace tandem::ops::internal {

// Elements of k per step: one 32-byte load of 16-bit weights.
inline constexpr int64_t kAvx2Chunk = 16;

// Floats SplitXAvx2 writes for m rows of k elements.
inline int64_t SplitXAvx2Floats(int64_t m, int64_t k) {
  return m * ((k + kAvx2Chunk - 1) / kAvx2Chunk) * kAvx2Chunk;
}

// x [m, k] regrouped for RowsAvx2Half on weights of type `wt` (kBF16 or
// kF16): per row and 16-element chunk, for bf16 its 8 even elements, then
// its 8 odd ones, for f16 its 16 elements in order; zero past k. Requires
// AVX2.
void SplitXAvx2(const float* x, int64_t m, int64_t k, GemvWeight wt, float* xs);

// y[i, j] = x[i] · widen(w[j]) (+ bias[j]) for rows j in [n0, n1) of the
// bf16 or f16 weight w [n, k] and all m rows of x, given `xs` from
// SplitXAvx2 for the same `wt`. Every output is accumulated the same way,
// whatever m and the rows it is computed with: in 8 lanes for each half of
// each chunk (bf16: the even and the odd elements; f16: the first and the
// last 8), over the chunks in order (FMAs), then the two added and their 8
// lanes reduced by one fixed tree, then the bias. Requires AVX2, FMA and
// F16C (KernelIsa::kAvx2).
void RowsAvx2Half(const float* xs, int64_t m, const uint16_t* w, GemvWeight wt, int64_t n,
                  int64_t k, const float* bias, int64_t n0, int64_t n1, float* y);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_GEMV_AVX2_H_
