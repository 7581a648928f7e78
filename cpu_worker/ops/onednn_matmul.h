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

// The same product for bf16 x and w, computed as its transpose w · x^T with
// the weight as oneDNN's source operand: its brgemm kernels read the source
// where it lies, while a `ba` weight is repacked on every call. Worth it
// for decode-sized batches on AMX (OnednnBf16UsesAmx), where this reads the
// weight ~1.25x faster than the normal GEMM at 8-16 rows. x holds
// `cols` >= m rows, those past m zero (the caller's padding); `cols` is the
// primitive's N, so a caller that rounds m up to a few fixed sizes makes a
// row's result independent of m within each: every column of the product
// is computed the same way whatever the others hold (linear_test.cc checks
// it; oneDNN does not document it). y[m, n] and bias as above.
void OnednnMatmulWeightAsSrc(const uint16_t* x, int64_t m, int64_t cols, const uint16_t* w,
                             int64_t n, int64_t k, const float* bias, float* y);

// bf16 weights in oneDNN's blocked layout BA16a64b2a: the [k, n] weight in
// blocks of 32 inputs by 64 outputs, each block's inputs in pairs (the
// operand layout of vdpbf16ps), k and n zero-padded to whole blocks. Its
// GEMM kernels stream such a weight in address order, so it reads close to
// the memory's bandwidth at one row and keeps computing at its bf16 rate
// at 16 and more, where the in-place kernels read [n, k] rows
// (linear.h: WeightStorage::kBF16Packed says how much faster).
// Bytes of an [n, k] weight in that layout.
int64_t PackedBf16Bytes(int64_t n, int64_t k);
// Writes the row-major bf16 [n, k] weight `w` to `packed` (PackedBf16Bytes
// bytes, 64-byte aligned) in that layout.
void PackBf16(const uint16_t* w, int64_t n, int64_t k, void* packed);
// y[m, n] = x[m, k] · w^T (+ bias[n]) for bf16 x and a weight packed by
// PackBf16. A row's result is the same bits whatever m and the thread count
// (linear_test.cc checks it for m = 1 to 48 and 1 or 2 threads; oneDNN does
// not document it), so callers need not pad m to fixed sizes for that.
void OnednnMatmulPacked(const uint16_t* x, int64_t m, const void* packed, int64_t n, int64_t k,
                        const float* bias, float* y);

// True if oneDNN runs bf16 GEMMs on AMX here (the CPU has it and
// ONEDNN_MAX_CPU_ISA does not rule it out). Probed once.
bool OnednnBf16UsesAmx();

// Number of cached primitives (for tests of the cache bound).
size_t OnednnMatmulCacheSize();
// Cache entries beyond this are dropped all at once.
inline constexpr size_t kOnednnMatmulCacheLimit = 256;

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_ONEDNN_MATMUL_H_
