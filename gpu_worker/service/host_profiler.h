// Start-up peaks of the host device, measured cheaply (well under a second):
// a 64 MiB memcpy (memory bandwidth; on the host device an "H2D" copy is the
// same memcpy), a 1024x1024x1024 GEMM in f32 and with bf16 weights (bf16
// weights run in f32 on CPUs without AVX512-BF16, and that is what is
// measured then), and the per-call overhead of a tiny Linear (the host
// device's "kernel launch"). The measurements themselves live in
// cpu_worker/perf (shared with `tandem bench`); this keeps the best of each.
#ifndef TANDEM_GPU_WORKER_SERVICE_HOST_PROFILER_H_
#define TANDEM_GPU_WORKER_SERVICE_HOST_PROFILER_H_

#include "absl/status/statusor.h"
#include "proto/worker.pb.h"

namespace tandem {

struct HostProfileOptions {
  int64_t copy_bytes = 64 << 20;
  int64_t gemm_size = 1024;  // M = N = K
  int repeats = 3;           // best of, after one warm-up
};

absl::StatusOr<proto::ProfileResponse> ProfileHostDevice(const HostProfileOptions& options = {});

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_SERVICE_HOST_PROFILER_H_
