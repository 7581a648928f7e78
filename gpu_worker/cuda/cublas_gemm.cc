#include "gpu_worker/cuda/cublas_gemm.h"

#include <atomic>
#include <cstdint>
#include <vector>

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
  // cublasGemmEx takes int sizes.
  if (m < 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
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

namespace {

// One GEMM per expert with rows.
absl::Status GemmPerExpert(const CublasHandle& h, const void* x,
                           const std::vector<const void*>& weights, ActType type,
                           const std::vector<int32_t>& offsets, int64_t n, int64_t k, float* y) {
  const int64_t elem = type == ActType::kBF16 ? 2 : 4;
  for (size_t e = 0; e < weights.size(); ++e) {
    const int64_t begin = offsets[e], rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    const auto* xe = static_cast<const uint8_t*>(x) + begin * k * elem;
    absl::Status s = Gemm(h, xe, weights[e], type, rows, n, k, y + begin * n);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GroupedGemm(const CublasHandle& h, const void* x, const std::vector<const void*>& weights,
                         ActType type, const std::vector<int32_t>& offsets, int64_t n, int64_t k,
                         float* y, void** device_ptrs) {
  if (offsets.size() != weights.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedGemm: ", weights.size(),
                                                   " experts but ", offsets.size(), " offsets"));
  }
  if (n <= 0 || k <= 0 || n > INT32_MAX || k > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedGemm of width ", n, "x", k));
  }
  int64_t groups = 0;
  for (size_t e = 0; e < weights.size(); ++e) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows < 0) return absl::InvalidArgumentError("GroupedGemm: offsets must not decrease");
    groups += rows > 0 ? 1 : 0;
  }
  if (groups == 0) return absl::OkStatus();
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120500
  // Set once a cuBLAS has refused the grouped call for a type, so later
  // calls go straight to one GEMM per expert.
  static std::atomic<bool> refused[2] = {false, false};
  std::atomic<bool>& refused_type = refused[type == ActType::kBF16 ? 1 : 0];
  if (groups > 1 && !refused_type.load(std::memory_order_relaxed)) {
    // Each expert is a group of one problem, laid out as Gemm lays out one
    // (column-major y^T [n, rows] = w [n, k] · x^T [k, rows]).
    const int64_t elem = type == ActType::kBF16 ? 2 : 4;
    const auto g = static_cast<size_t>(groups);
    std::vector<cublasOperation_t> ta(g, CUBLAS_OP_T), tb(g, CUBLAS_OP_N);
    std::vector<int> m(g, static_cast<int>(n)), cols(g), kk(g, static_cast<int>(k)),
        ld_wx(g, static_cast<int>(k)), ld_y(g, static_cast<int>(n)), size(g, 1);
    std::vector<float> alpha(g, 1.0f), beta(g, 0.0f);
    std::vector<const void*> ptrs(3 * g);  // [w..., x..., y...]
    size_t i = 0;
    for (size_t e = 0; e < weights.size(); ++e) {
      const int64_t begin = offsets[e], rows = offsets[e + 1] - offsets[e];
      if (rows == 0) continue;
      cols[i] = static_cast<int>(rows);
      ptrs[i] = weights[e];
      ptrs[g + i] = static_cast<const uint8_t*>(x) + begin * k * elem;
      ptrs[2 * g + i] = y + begin * n;
      ++i;
    }
    cudaStream_t stream = nullptr;
    TANDEM_CUBLAS_RETURN_IF_ERROR(cublasGetStream(h.get(), &stream));
    // Pageable source: the copy has taken the bytes when it returns.
    const cudaError_t c = cudaMemcpyAsync(device_ptrs, ptrs.data(), ptrs.size() * sizeof(void*),
                                          cudaMemcpyHostToDevice, stream);
    if (c != cudaSuccess) {
      return absl::InternalError(absl::StrCat("GroupedGemm: copying ", g,
                                              " pointer triples: ", cudaGetErrorString(c)));
    }
    const cudaDataType_t dt = type == ActType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
    const void* const* d_w = const_cast<const void* const*>(device_ptrs);
    const void* const* d_x = d_w + g;
    void* const* d_y = device_ptrs + 2 * g;
    const cublasStatus_t s = cublasGemmGroupedBatchedEx(
        h.get(), ta.data(), tb.data(), m.data(), cols.data(), kk.data(), alpha.data(), d_w, dt,
        ld_wx.data(), d_x, dt, ld_wx.data(), beta.data(), d_y, CUDA_R_32F, ld_y.data(),
        static_cast<int>(g), size.data(), CUBLAS_COMPUTE_32F);
    // A cuBLAS without this type combination refuses it before launching
    // anything: fall through to one GEMM per expert. Its documentation
    // does not list bf16 inputs with an f32 output for the grouped call,
    // and a refusal may come as INVALID_VALUE rather than NOT_SUPPORTED;
    // the arguments are checked above (sizes positive and within int), so
    // either code here means the combination, and the per-expert GEMMs
    // report any real fault themselves.
    if (s != CUBLAS_STATUS_NOT_SUPPORTED && s != CUBLAS_STATUS_INVALID_VALUE) {
      return CublasStatus(s, "cublasGemmGroupedBatchedEx", __FILE__, __LINE__);
    }
    refused_type.store(true, std::memory_order_relaxed);
  }
#else
  (void)device_ptrs;
#endif
  return GemmPerExpert(h, x, weights, type, offsets, n, k, y);
}

}  // namespace tandem::cuda
