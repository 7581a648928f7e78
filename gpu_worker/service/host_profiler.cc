#include "gpu_worker/service/host_profiler.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "cpu_worker/perf/machine_probe.h"

namespace tandem {
namespace {

// The profiler reports best-of figures: on a shared machine the fastest run
// is the one least disturbed by others.
double Best(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

}  // namespace

absl::StatusOr<proto::ProfileResponse> ProfileHostDevice(const HostProfileOptions& o) {
  if (o.copy_bytes <= 0 || o.gemm_size <= 0 || o.repeats <= 0) {
    return absl::InvalidArgumentError("profile: sizes must be positive");
  }
  proto::ProfileResponse r;

  // Memory bandwidth: bytes copied per second (on the host device an "H2D"
  // copy is this memcpy).
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> copy,
                          perf::CopyBandwidthGbs(o.copy_bytes, 1, o.repeats));
  r.set_read_bandwidth_gbs(Best(copy));
  r.set_h2d_bandwidth_gbs(Best(copy));

  const int64_t s = o.gemm_size;
  TANDEM_ASSIGN_OR_RETURN(perf::GemmMeasurement f32,
                          perf::MeasureGemm(perf::GemmKind::kF32, s, s, s, 1, o.repeats));
  r.set_gemm_gflops_f32(Best(f32.gflops));
  TANDEM_ASSIGN_OR_RETURN(perf::GemmMeasurement bf16,
                          perf::MeasureGemm(perf::GemmKind::kBF16, s, s, s, 1, o.repeats));
  r.set_gemm_gflops_bf16(Best(bf16.gflops));

  TANDEM_ASSIGN_OR_RETURN(std::vector<double> us, perf::LinearCallOverheadUs(1, o.repeats));
  r.set_launch_overhead_us(*std::min_element(us.begin(), us.end()));
  return r;
}

}  // namespace tandem
