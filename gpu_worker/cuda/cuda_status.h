// CUDA runtime errors as absl::Status, naming the failed statement and where.
#ifndef TANDEM_GPU_WORKER_CUDA_CUDA_STATUS_H_
#define TANDEM_GPU_WORKER_CUDA_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::cuda {

inline absl::Status CudaStatus(cudaError_t e, const char* stmt, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  const auto code = (e == cudaErrorMemoryAllocation) ? absl::StatusCode::kResourceExhausted
                                                     : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(file, ":", line, ": ", stmt, ": ",
                                         cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

}  // namespace tandem::cuda

#define TANDEM_CUDA_RETURN_IF_ERROR(stmt)                                            \
  do {                                                                               \
    ::absl::Status tandem_cuda_s_ = ::tandem::cuda::CudaStatus((stmt), #stmt,         \
                                                               __FILE__, __LINE__);  \
    if (!tandem_cuda_s_.ok()) return tandem_cuda_s_;                                 \
  } while (0)

#endif  // TANDEM_GPU_WORKER_CUDA_CUDA_STATUS_H_
