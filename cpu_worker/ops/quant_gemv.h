// Linear layers on GGUF block-quantized weights (Q8_0, Q4_0, Q4_1), computed
// on the blocks where they lie (the checkpoint's mapping): no dequantized copy.
//
// Each row of x is quantized to int8 in blocks of 32 (as llama.cpp's Q8_0
// activations: d = max|x| / 127, q = round(x / d)) together with the block's
// integer sum (for Q4_0's -8 offset and Q4_1's min term). The kernels then
// take integer dot products of weight and activation blocks (AVX512-VNNI
// vpdpbusd; AVX2 vpmaddubsw + vpmaddwd; plain C++ elsewhere), scale each by
// d_w * d_x and accumulate in f32. Weight rows are split over OpenMP
// threads; every row of x is computed against a weight row while it is in
// L1, so each weight byte comes from memory once per call.
//
// The result equals x_hat · W_deq^T exactly up to f32 rounding of the
// per-block scaling and accumulation, where x_hat is x after the activation
// rounding (QuantizeActivationsReference) and W_deq the dequantized weight.
// Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_QUANT_GEMV_H_
#define TANDEM_CPU_WORKER_OPS_QUANT_GEMV_H_

#include <cstdint>

#include "common/dtype.h"
#include "cpu_worker/ops/cpu_features.h"

namespace tandem::ops::internal {

// Linear sends batches up to these many rows to QuantLinear, larger ones to
// the AMX kernel on dequantized rows (AmxQuantLinear, where AMX is usable,
// up to 32 rows) or QuantLinearViaGemm. Measured with linear_bench: against
// oneDNN's AVX512-BF16/AMX GEMM (BM_QuantPath, K = N = 4096, one thread)
// the int8 kernel wins up to 8 rows and loses from 16; against the AMX
// kernel (BM_QuantSmallBatchPaths, Q8_0, cold, 2 threads) it reads 17 and
// 13 GB/s at 2 and 4 rows against 13-14 and 12, and 7 at 8 rows against
// 12-14; against oneDNN's f32 GEMM (an AVX2 machine, emulated with
// TANDEM_CPU_ISA=avx2 DNNL_MAX_CPU_ISA=AVX2) it wins up to 32 rows and
// loses at 64.
inline constexpr int64_t kQuantGemvMaxRowsAmx = 4;
inline constexpr int64_t kQuantGemvMaxRowsBf16 = 8;
inline constexpr int64_t kQuantGemvMaxRowsF32 = 32;
// True if Linear runs an m-row batch through QuantLinear.
bool QuantLinearUsesGemv(int64_t m);

// y[m, n] = x[m, k] · W^T (+ bias[n]); `w` is [n, k] in GGUF blocks of `t`
// (kQ8_0, kQ4_0 or kQ4_1), rows of k / 32 blocks, k a multiple of 32.
// `isa` picks the kernel (any level the host supports: kAvx512 runs the
// AVX2 kernel, since the wide one needs VNNI). Any m works. Uses a
// thread-local scratch of about 3 * m * k bytes, grown once.
void QuantLinear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                 const float* bias, float* y, KernelIsa isa);

// The alternative for large m: dequantize panels of weight rows into a
// thread-local bf16 (when the CPU has AVX512-BF16, f32 otherwise) buffer and
// run oneDNN's GEMM on each. Kept for measurement (linear_bench) and used
// where it is faster.
// `panel_rows` > 0 overrides the panel height (for tests). `packed`: `w`
// is a weight packed at load (quant_packed.h), not blocks in place.
void QuantLinearViaGemm(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                        const float* bias, float* y, int64_t panel_rows = 0,
                        bool packed = false);

// x_hat[k]: the f32 values the kernels' int8 activations stand for,
// d * round(x / d) per block of 32 — the same rounding as every kernel.
void QuantizeActivationsReference(const float* x, int64_t k, float* x_hat);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_QUANT_GEMV_H_
