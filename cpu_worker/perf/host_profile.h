// This machine's CPU as the planner sees it: a HardwareProfile measured with
// the cpu_worker's own kernels (machine_probe.h), the figures the start-up
// profiler hands the planner when no hand-written profile is given, and the
// profile of the host device (gpu.count = 0; the "link" is a one-thread
// memcpy, which is what a host-to-"device" copy costs there).
//
// Measuring takes a few seconds at the default sizes, so the result is
// cached per machine (MachineProfileCachePath()) and reused while the
// machine and its thread count stay the same.
#ifndef TANDEM_CPU_WORKER_PERF_HOST_PROFILE_H_
#define TANDEM_CPU_WORKER_PERF_HOST_PROFILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"

namespace tandem::perf {

struct HostProfileOptions {
  // Read sweep buffer: several times the last-level cache, so the figure is
  // DRAM's, not L3's (see ReadBandwidthGbs).
  int64_t bandwidth_bytes = int64_t{512} << 20;
  int64_t copy_bytes = int64_t{128} << 20;  // one-thread memcpy (the host link)
  // f32 and bf16 GEMM: a compute-bound shape, as a prefill or a large
  // micro-batch presents to the CPU.
  int64_t gemm_m = 256;
  int64_t gemm_n = 4096;
  int64_t gemm_k = 4096;
  // int8 (Q8_0) weights run on the int8 kernel only up to
  // Int8KernelMaxRows() rows: measured there, at [n, k] (k a multiple of 32).
  int64_t int8_n = 4096;
  int64_t int8_k = 4096;
  // CPU decode attention (Neo): `attention_sequences` sequences holding
  // `attention_context` positions each, one decode token through one layer
  // of Mixtral/LLaMA-70B's head layout (32 q / 8 kv heads, head_dim 128).
  // attention_sequences = 0 skips it (attention bandwidth = the read
  // bandwidth, which the profile reads as "unknown").
  int64_t attention_sequences = 64;
  int64_t attention_context = 2048;
  int warmup = 1;
  int repeats = 3;   // the best of these is kept: the machine's capability
  std::string name;  // profile name; "" = "host-<hostname>"
};

// Options that measure in well under a second (tests, `--quick`): small
// buffers and shapes, so the figures are rough (cache-resident bandwidths
// read high).
HostProfileOptions QuickHostProfileOptions();

// Measures this machine: CpuSpec from the probes (threads =
// omp_get_max_threads(), memory from /proc/meminfo capped by the cgroup
// limit, name from /proc/cpuinfo), link = one-thread memcpy bandwidth,
// gpu.count = 0. InvalidArgument for bad options; the probes' errors
// otherwise. The result Validate()s.
absl::StatusOr<HardwareProfile> MeasureHostProfile(const HostProfileOptions& options = {});

// The cached profile at `path` when it is a valid host profile measured with
// the current thread count; otherwise measures with `options` and saves the
// result there (creating the directory). A cache that cannot be written is
// not an error: the measured profile is returned all the same.
absl::StatusOr<HardwareProfile> LoadOrMeasureHostProfileAt(const std::string& path,
                                                           const HostProfileOptions& options = {});

// LoadOrMeasureHostProfileAt(MachineProfileCachePath(), options).
absl::StatusOr<HardwareProfile> LoadOrMeasureHostProfile(const HostProfileOptions& options = {});

// Physical memory the process may use: MemTotal of /proc/meminfo, capped by
// the cgroup memory limit when one is set (a container's share of the
// host). 0 if neither can be read.
int64_t HostMemoryBytes();

}  // namespace tandem::perf

#endif  // TANDEM_CPU_WORKER_PERF_HOST_PROFILE_H_
