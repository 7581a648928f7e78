#include "gpu_worker/service/host_profiler.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/linear.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

// Best wall time of `repeats` runs of fn, after one untimed warm-up.
template <typename Fn>
double BestSeconds(int repeats, Fn&& fn) {
  fn();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return std::max(best, 1e-9);
}

TensorView View(DType dtype, int64_t n, int64_t k, const void* data, int64_t elem_bytes) {
  TensorView v;
  v.name = "profile.weight";
  v.dtype = dtype;
  v.shape = {n, k};
  v.data = data;
  v.nbytes = n * k * elem_bytes;
  return v;
}

// GFLOP/s of y = x · W^T with x [s, s] and W [s, s] given as `w`.
absl::StatusOr<double> GemmGflops(const TensorView& w, ops::ComputeType prefer, int64_t s,
                                  int repeats) {
  TANDEM_ASSIGN_OR_RETURN(ops::LinearWeight lw, ops::LinearWeight::Create(w, prefer));
  std::vector<float> x(static_cast<size_t>(s * s), 0.5f), y(static_cast<size_t>(s * s));
  const double t = BestSeconds(repeats, [&] { ops::Linear(x.data(), s, lw, nullptr, y.data()); });
  return 2.0 * static_cast<double>(s) * static_cast<double>(s) * static_cast<double>(s) / t / 1e9;
}

}  // namespace

absl::StatusOr<proto::ProfileResponse> ProfileHostDevice(const HostProfileOptions& o) {
  if (o.copy_bytes <= 0 || o.gemm_size <= 0 || o.repeats <= 0) {
    return absl::InvalidArgumentError("profile: sizes must be positive");
  }
  proto::ProfileResponse r;

  // Memory bandwidth: bytes copied per second (first touch outside the timing).
  {
    std::vector<uint8_t> src(static_cast<size_t>(o.copy_bytes), 1), dst(src.size(), 0);
    const double t =
        BestSeconds(o.repeats, [&] { std::memcpy(dst.data(), src.data(), src.size()); });
    const double gbs = static_cast<double>(o.copy_bytes) / t / 1e9;
    r.set_read_bandwidth_gbs(gbs);
    r.set_h2d_bandwidth_gbs(gbs);
  }

  const int64_t s = o.gemm_size;
  {
    std::vector<float> w(static_cast<size_t>(s * s), 0.25f);
    TANDEM_ASSIGN_OR_RETURN(
        double gf, GemmGflops(View(DType::kF32, s, s, w.data(), 4), ops::ComputeType::kF32, s,
                              o.repeats));
    r.set_gemm_gflops_f32(gf);
  }
  {
    std::vector<uint16_t> w(static_cast<size_t>(s * s), 0x3e80);  // bf16 0.25
    TANDEM_ASSIGN_OR_RETURN(
        double gf, GemmGflops(View(DType::kBF16, s, s, w.data(), 2), ops::ComputeType::kBF16, s,
                              o.repeats));
    r.set_gemm_gflops_bf16(gf);
  }

  // Per-op overhead: a 1-row Linear on a 16x16 weight, averaged.
  {
    constexpr int64_t kDim = 16;
    constexpr int kCalls = 1000;
    std::vector<float> w(kDim * kDim, 0.5f), x(kDim, 1.0f), y(kDim);
    TANDEM_ASSIGN_OR_RETURN(ops::LinearWeight lw,
                            ops::LinearWeight::Create(View(DType::kF32, kDim, kDim, w.data(), 4),
                                                      ops::ComputeType::kF32));
    const double t = BestSeconds(o.repeats, [&] {
      for (int i = 0; i < kCalls; ++i) ops::Linear(x.data(), 1, lw, nullptr, y.data());
    });
    r.set_launch_overhead_us(t / kCalls * 1e6);
  }
  return r;
}

}  // namespace tandem
