// Thin wrapper over oneDNN 2.6's matmul primitive (v2 API) so that no other
// file includes dnnl.hpp or sees its exceptions.
#ifndef TANDEM_CPU_WORKER_OPS_ONEDNN_MATMUL_H_
#define TANDEM_CPU_WORKER_OPS_ONEDNN_MATMUL_H_

#include <cstddef>
#include <cstdint>

namespace tandem::ops::internal {

// Element type of the GEMM's src and weights; dst and bias are always f32.
enum class MatmulType { kF32, kBF16 };

// y[m, n] = x[m, k] · w[n, k]^T (+ bias[n]); x and w are row-major in `type`
// (bf16 as raw uint16_t), y and bias f32. `bias` may be null. Primitives are
// cached per (m, n, k, type, bias); execution uses a thread-local scratchpad,
// so concurrent calls from several threads are safe. A oneDNN error here is
// an internal invariant violation (shapes are validated by the callers).
void OnednnMatmul(const void* x, int64_t m, const void* w, int64_t n, int64_t k, const float* bias,
                  MatmulType type, float* y);

// Number of cached primitives (for tests of the cache bound).
size_t OnednnMatmulCacheSize();
// Cache entries beyond this are dropped all at once.
inline constexpr size_t kOnednnMatmulCacheLimit = 256;

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_ONEDNN_MATMUL_H_
