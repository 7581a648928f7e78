// Measures what a CUDA device can do, for the planner's HardwareProfile
// (common/hardware_profile.h): HBM bandwidth (a device-to-device copy),
// host-to-device and device-to-host bandwidth and latency from pinned
// memory, attainable GEMM FLOP/s through cuBLAS (bf16 and f32 with f32
// accumulation, int8 with int32), the cost of one kernel launch, and the
// memory size. Each figure is the best of a few timed runs after a warm-up
// (noise only ever slows a run). Takes a few seconds.
#ifndef TANDEM_GPU_WORKER_CUDA_CUDA_PROFILE_H_
#define TANDEM_GPU_WORKER_CUDA_CUDA_PROFILE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/hardware_profile.h"

namespace tandem::cuda {

struct CudaProfileOptions {
  int device = 0;
  int64_t copy_bytes = int64_t{256} << 20;  // PCIe transfers
  int64_t hbm_bytes = int64_t{1} << 30;     // device-to-device copy
  int64_t gemm_size = 8192;                 // M = N = K of the bf16/int8 GEMMs
  int64_t f32_gemm_size = 4096;
  int repeats = 5;
};

// Fills hw->gpu (count 1: the measured device; the caller sets the count
// for a machine of several alike) and hw->link. The CPU side is untouched.
absl::Status MeasureCudaProfile(const CudaProfileOptions& options, HardwareProfile* hw);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_CUDA_PROFILE_H_
