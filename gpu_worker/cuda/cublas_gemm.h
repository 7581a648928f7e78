// GEMMs of the CUDA device through cuBLAS: the linear layers (weights
// row-major [n, k] as checkpoints store them, used in place) and the
// per-expert GEMMs of a MoE layer over tokens grouped by expert
// (kernels/moe_routing.h). cuBLAS errors become absl::Status naming the call
// and where.
#ifndef TANDEM_GPU_WORKER_CUDA_CUBLAS_GEMM_H_
#define TANDEM_GPU_WORKER_CUDA_CUBLAS_GEMM_H_

#include <cublas_v2.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu_worker/cuda/cuda_resources.h"
#include "gpu_worker/cuda/kernels/act_dtype.h"

namespace tandem::cuda {

absl::Status CublasStatus(cublasStatus_t s, const char* stmt, const char* file, int line);

// A cuBLAS handle bound to one stream. Move-only.
class CublasHandle {
 public:
  static absl::StatusOr<CublasHandle> Create(const Stream& stream);
  CublasHandle() = default;
  ~CublasHandle();
  CublasHandle(CublasHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& o) noexcept;
  cublasHandle_t get() const { return h_; }

 private:
  explicit CublasHandle(cublasHandle_t h) : h_(h) {}
  cublasHandle_t h_ = nullptr;
};

// y[m, n] (f32) = x[m, k] · w[n, k]^T (+ beta * y), x and w row-major in
// `type` (both f32, or both bf16), accumulating in f32. m == 0 is a no-op.
absl::Status Gemm(const CublasHandle& h, const void* x, const void* w, ActType type, int64_t m,
                  int64_t n, int64_t k, float* y, float beta = 0.0f);

// For each expert e with rows [offsets[e], offsets[e + 1]) of the grouped
// input x [rows, k]: y[those rows] = x[those rows] · weights[e]^T, each
// weights[e] [n, k] in `type`. `offsets` is on the host (experts + 1
// entries); experts with no rows are skipped. One cublasGemmGroupedBatchedEx
// call (cuBLAS 12.5 and later) for all the experts, its pointer arrays
// copied on the handle's stream into `device_ptrs` (device memory of at
// least 3 * weights.size() pointers, not reused before the call has run);
// one GEMM per expert where that call is missing or refuses the types.
absl::Status GroupedGemm(const CublasHandle& h, const void* x, const std::vector<const void*>& weights,
                         ActType type, const std::vector<int32_t>& offsets, int64_t n, int64_t k,
                         float* y, void** device_ptrs);

}  // namespace tandem::cuda

#define TANDEM_CUBLAS_RETURN_IF_ERROR(stmt)                                                \
  do {                                                                                     \
    ::absl::Status tandem_cublas_s_ =                                                      \
        ::tandem::cuda::CublasStatus((stmt), #stmt, __FILE__, __LINE__);                   \
    if (!tandem_cublas_s_.ok()) return tandem_cublas_s_;                                   \
  } while (0)

#endif  // TANDEM_GPU_WORKER_CUDA_CUBLAS_GEMM_H_
