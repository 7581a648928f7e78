#include "gpu_worker/cuda/cublas_gemm.h"

#include "absl/strings/str_cat.h"

namespace tandem::cuda {

absl::Status CublasStatus(cublasStatus_t s, const char* stmt, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const auto code = s == CUBLAS_STATUS_ALLOC_FAILED     ? absl::StatusCode::kResourceExhausted
                    : s == CUBLAS_STATUS_INVALID_VALUE  ? absl::StatusCode::kInvalidArgument
                    : s == CUBLAS_STATUS_NOT_SUPPORTED  ? absl::StatusCode::kUnimplemented
                                                        : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(file, ":", line, ": ", stmt, ": ",
                                         cublasGetStatusName(s), ": ", cublasGetStatusString(s)));
}

absl::StatusOr<CublasHandle> CublasHandle::Create(const Stream& stream) {
  cublasHandle_t h = nullptr;
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
  CublasHandle handle(h);
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublasSetStream(h, stream.get()));
  return handle;
}

CublasHandle::~CublasHandle() {
  if (h_ != nullptr) cublasDestroy(h_);
}

CublasHandle& CublasHandle::operator=(CublasHandle&& o) noexcept {
  if (this != &o) {
    if (h_ != nullptr) cublasDestroy(h_);
    h_ = std::exchange(o.h_, nullptr);
  }
  return *this;
}

absl::Status Gemm(const CublasHandle& h, const void* x, const void* w, ActType type, int64_t m,
                  int64_t n, int64_t k, float* y, float beta) {
  if (m < 0 || n <= 0 || k <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm of ", m, "x", n, "x", k));
  }
  if (m == 0) return absl::OkStatus();
  // cuBLAS is column-major: row-major y[m, n] is y^T [n, m] column-major,
  // = w [n, k] · x^T [k, m]. Row-major w [n, k] read column-major is w^T
  // [k, n] (ld k), so OP_T gives w; row-major x [m, k] read column-major is
  // x^T [k, m] (ld k), OP_N.
  const cudaDataType_t dt = type == ActType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1.0f;
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
      h.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, w, dt, static_cast<int>(k), x, dt, static_cast<int>(k), &beta,
      y, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status GroupedGemm(const CublasHandle& h, const void* x, const std::vector<const void*>& weights,
                         ActType type, const std::vector<int32_t>& offsets, int64_t n, int64_t k,
                         float* y) {
  if (offsets.size() != weights.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedGemm: ", weights.size(),
                                                   " experts but ", offsets.size(), " offsets"));
  }
  const int64_t elem = type == ActType::kBF16 ? 2 : 4;
  for (size_t e = 0; e < weights.size(); ++e) {
    const int64_t begin = offsets[e], rows = offsets[e + 1] - offsets[e];
    if (rows < 0) return absl::InvalidArgumentError("GroupedGemm: offsets must not decrease");
    if (rows == 0) continue;
    const auto* xe = static_cast<const uint8_t*>(x) + begin * k * elem;
    absl::Status s = Gemm(h, xe, weights[e], type, rows, n, k, y + begin * n);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace tandem::cuda
