#include "gpu_worker/cuda/cuda_profile.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gpu_worker/cuda/cublas_gemm.h"
#include "gpu_worker/cuda/cuda_resources.h"
#include "gpu_worker/cuda/cuda_status.h"
#include "gpu_worker/cuda/kernels/empty_kernel.h"

namespace tandem::cuda {
namespace {

// Pinned host memory, freed on scope exit.
class PinnedBuffer {
 public:
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes) {
    void* p = nullptr;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes));
    return PinnedBuffer(p);
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  ~PinnedBuffer() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  void* data() const { return p_; }

 private:
  explicit PinnedBuffer(void* p) : p_(p) {}
  void* p_;
};

// The shortest time, in seconds, of `repeats` runs of `work` on `stream`
// (after one warm-up), timed with events.
absl::StatusOr<double> BestSeconds(const Stream& stream, int repeats,
                                   const std::function<absl::Status()>& work) {
  TANDEM_ASSIGN_OR_RETURN(Event start, Event::Create(/*timing=*/true));
  TANDEM_ASSIGN_OR_RETURN(Event end, Event::Create(/*timing=*/true));
  TANDEM_RETURN_IF_ERROR(work());
  TANDEM_RETURN_IF_ERROR(stream.Synchronize());
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repeats; ++i) {
    TANDEM_RETURN_IF_ERROR(start.Record(stream));
    TANDEM_RETURN_IF_ERROR(work());
    TANDEM_RETURN_IF_ERROR(end.Record(stream));
    TANDEM_RETURN_IF_ERROR(end.Synchronize());
    TANDEM_ASSIGN_OR_RETURN(const float ms, Event::ElapsedMs(start, end));
    best = std::min(best, static_cast<double>(ms) * 1e-3);
  }
  if (!(best > 0)) return absl::InternalError("a timed run took no time");
  return best;
}

absl::Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                  const Stream& s) {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, s.get()));
  return absl::OkStatus();
}

}  // namespace

absl::Status MeasureCudaProfile(const CudaProfileOptions& o, HardwareProfile* hw) {
  if (o.copy_bytes <= 0 || o.hbm_bytes <= 0 || o.gemm_size <= 0 || o.f32_gemm_size <= 0 ||
      o.repeats <= 0) {
    return absl::InvalidArgumentError("CUDA profile sizes and repeats must be positive");
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, o.device));
  size_t free_bytes = 0, total_bytes = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  TANDEM_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  GpuSpec& g = hw->gpu;
  LinkSpec& link = hw->link;
  g.name = prop.name;
  g.count = 1;
  g.memory_bytes = static_cast<int64_t>(total_bytes);

  // PCIe: bandwidth from a large pinned copy, latency from a 4-byte one.
  const auto copy = static_cast<size_t>(o.copy_bytes);
  TANDEM_ASSIGN_OR_RETURN(PinnedBuffer host, PinnedBuffer::Allocate(copy));
  TANDEM_ASSIGN_OR_RETURN(DeviceBuffer dev, DeviceBuffer::Allocate(copy));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dev.data(), 0, copy, stream.get()));
  TANDEM_ASSIGN_OR_RETURN(const double h2d, BestSeconds(stream, o.repeats, [&] {
    return Copy(dev.data(), host.data(), copy, cudaMemcpyHostToDevice, stream);
  }));
  TANDEM_ASSIGN_OR_RETURN(const double d2h, BestSeconds(stream, o.repeats, [&] {
    return Copy(host.data(), dev.data(), copy, cudaMemcpyDeviceToHost, stream);
  }));
  TANDEM_ASSIGN_OR_RETURN(const double h2d_small, BestSeconds(stream, o.repeats * 4, [&] {
    return Copy(dev.data(), host.data(), 4, cudaMemcpyHostToDevice, stream);
  }));
  TANDEM_ASSIGN_OR_RETURN(const double d2h_small, BestSeconds(stream, o.repeats * 4, [&] {
    return Copy(host.data(), dev.data(), 4, cudaMemcpyDeviceToHost, stream);
  }));
  link.h2d_bandwidth = static_cast<double>(copy) / h2d;
  link.d2h_bandwidth = static_cast<double>(copy) / d2h;
  link.h2d_latency_s = h2d_small;
  link.d2h_latency_s = d2h_small;

  // HBM: a device-to-device copy reads and writes every byte.
  {
    const auto bytes = static_cast<size_t>(o.hbm_bytes);
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Allocate(bytes));
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.data(), 0, bytes, stream.get()));
    TANDEM_ASSIGN_OR_RETURN(const double t, BestSeconds(stream, o.repeats, [&] {
      return Copy(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream);
    }));
    g.memory_bandwidth = 2.0 * static_cast<double>(bytes) / t;
  }

  // Launch: 1000 empty kernels back to back, per launch.
  {
    constexpr int kLaunches = 1000;
    TANDEM_ASSIGN_OR_RETURN(const double t, BestSeconds(stream, o.repeats, [&]() -> absl::Status {
      for (int i = 0; i < kLaunches; ++i) {
        TANDEM_CUDA_RETURN_IF_ERROR(static_cast<cudaError_t>(LaunchEmptyKernel(stream.get())));
      }
      return absl::OkStatus();
    }));
    g.launch_overhead_s = t / kLaunches;
  }

  // GEMMs through cuBLAS, on zeroed operands (the time does not depend on
  // the values).
  TANDEM_ASSIGN_OR_RETURN(CublasHandle blas, CublasHandle::Create(stream));
  auto gemm_flops = [&](ActType type, int64_t n) -> absl::StatusOr<double> {
    const size_t elem = type == ActType::kBF16 ? 2 : 4;
    const auto in_bytes = static_cast<size_t>(n * n) * elem;
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(in_bytes));
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Allocate(in_bytes));
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(static_cast<size_t>(n * n) * 4));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x.data(), 0, in_bytes, stream.get()));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.data(), 0, in_bytes, stream.get()));
    TANDEM_ASSIGN_OR_RETURN(const double t, BestSeconds(stream, o.repeats, [&] {
      return Gemm(blas, x.data(), w.data(), type, n, n, n, y.as<float>());
    }));
    return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / t;
  };
  TANDEM_ASSIGN_OR_RETURN(g.bf16_flops, gemm_flops(ActType::kBF16, o.gemm_size));
  TANDEM_ASSIGN_OR_RETURN(g.f32_flops, gemm_flops(ActType::kF32, o.f32_gemm_size));

  // int8 x int8 -> int32 (cuBLAS wants the "TN" layout, which is ours).
  {
    const int64_t n = o.gemm_size;
    const auto in_bytes = static_cast<size_t>(n * n);
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(in_bytes));
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Allocate(in_bytes));
    TANDEM_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(in_bytes * 4));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x.data(), 0, in_bytes, stream.get()));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.data(), 0, in_bytes, stream.get()));
    const int32_t alpha = 1, beta = 0;
    const int ni = static_cast<int>(n);
    TANDEM_ASSIGN_OR_RETURN(const double t, BestSeconds(stream, o.repeats, [&]() -> absl::Status {
      TANDEM_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
          blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, ni, ni, ni, &alpha, w.data(), CUDA_R_8I, ni,
          x.data(), CUDA_R_8I, ni, &beta, y.data(), CUDA_R_32I, ni, CUBLAS_COMPUTE_32I,
          CUBLAS_GEMM_DEFAULT));
      return absl::OkStatus();
    }));
    g.int8_ops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / t;
  }
  return absl::OkStatus();
}

}  // namespace tandem::cuda
