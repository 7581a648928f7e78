// Small-batch linear kernel: y[m, n] = x[m, k] · w[n, k]^T (+ bias) for a
// few rows of x, streaming each row of the row-major weight exactly once.
// oneDNN 2.6's matmul repacks a `ba` (in place, [N, K] row-major) weight on
// every call, which dominates at decode batch sizes; this kernel reads the
// weight where it lies. Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_GEMV_H_
#define TANDEM_CPU_WORKER_OPS_GEMV_H_

#include <cstdint>

namespace tandem::ops::internal {

// Batches up to this many rows go through SmallBatchLinear, larger ones
// through oneDNN. Measured on Sapphire Rapids at N = K = 2048, one thread:
// f32 breaks even near 10 rows; bf16 near 5, where oneDNN's AMX kernels
// take over.
inline constexpr int64_t kSmallBatchMaxRowsF32 = 8;
inline constexpr int64_t kSmallBatchMaxRowsBf16 = 4;

// `w` is [n, k] f32, or bf16 (raw uint16_t) if `w_bf16`; x, y, bias f32.
// bf16 weights are widened exactly, so x · w is computed in f32 either way.
// Any m works (it is just slow for large m). Threads over n with OpenMP.
// The AVX-512 kernels run where MaxKernelIsa() allows (TANDEM_CPU_ISA=avx2
// or scalar rules them out); `allow_avx512 = false` forces the portable
// kernel (for tests). For bf16 they use a thread-local copy of x split into
// even and odd elements (about m * k floats, grown once).
void SmallBatchLinear(const float* x, int64_t m, const void* w, bool w_bf16, int64_t n, int64_t k,
                      const float* bias, float* y, bool allow_avx512 = true);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_GEMV_H_
