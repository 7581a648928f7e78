// 16-bit weights computed in f32: bf16 on CPUs without AVX512-BF16 (AVX2
// machines, AVX-512 machines before Cooper Lake and Zen 4), and f16 on any
// CPU with AVX2 (oneDNN 2.6 has no f16 GEMM). The weight stays where it
// lies, half the bytes of an f32 copy, and is widened exactly to f32 where
// it is used. Decode-sized batches widen it in the small-batch kernel's
// registers (gemv.h); larger batches come here, where panels of rows are
// widened into a cache-sized buffer for oneDNN's f32 GEMM. The products
// are those of f32 weights holding the same values: only the order of the
// f32 sums can differ from an f32 copy's. Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_WIDENED_LINEAR_H_
#define TANDEM_CPU_WORKER_OPS_WIDENED_LINEAR_H_

#include <cstdint>

#include "cpu_worker/ops/gemv.h"

namespace tandem::ops::internal {

// y[m, n] = x[m, k] · widen(w)[n, k]^T (+ bias[n]); w row-major bf16 or
// f16 (raw uint16_t, `wt` says which), x, y and bias f32; `bias` may be
// null. `panel_rows` > 0 sets the rows widened at a time (tests); 0 picks
// about 4 MiB of f32. Runs on any CPU (f16 widens with F16C where the CPU
// has it, else one element at a time).
void WidenedLinear(const float* x, int64_t m, const uint16_t* w, GemvWeight wt, int64_t n,
                   int64_t k, const float* bias, float* y, int64_t panel_rows = 0);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_WIDENED_LINEAR_H_
