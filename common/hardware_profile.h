// What a machine can do, as the planner sees it: peak compute per dtype,
// memory bandwidths and capacities of the GPU and the CPU, the PCIe link in
// both directions, and the fixed costs (kernel launch, CPU operator call,
// transfer latency). Workers measure their own (the Profile RPC); example
// profiles of the papers' testbeds ship in coordinator/planner/profiles/.
//
// Units inside the program are SI (bytes, bytes/s, FLOP/s, seconds). The
// JSON form uses the units people quote (GB, GB/s, TFLOP/s, microseconds;
// 1 GB = 1e9 bytes) and may carry // comments, so that every value of an
// example profile can say where it comes from.
#ifndef TANDEM_COMMON_HARDWARE_PROFILE_H_
#define TANDEM_COMMON_HARDWARE_PROFILE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem {

struct GpuSpec {
  std::string name;
  int count = 0;                 // GPUs of this kind; 0 = a CPU-only machine
  int64_t memory_bytes = 0;      // per GPU
  double bf16_flops = 0;         // attainable dense GEMM FLOP/s (bf16/fp16 tensor cores)
  double f32_flops = 0;
  double int8_ops = 0;
  double memory_bandwidth = 0;   // HBM/GDDR bytes/s
  double launch_overhead_s = 0;  // one kernel launch
  double interconnect_bandwidth = 0;  // GPU-GPU bytes/s (NVLink/PCIe P2P); 0 = unknown
};

struct CpuSpec {
  std::string name;
  int threads = 0;                // threads the figures below hold for
  int64_t memory_bytes = 0;       // host DRAM
  double bf16_flops = 0;          // attainable GEMM FLOP/s with `threads` threads
  double f32_flops = 0;
  double int8_ops = 0;
  double memory_bandwidth = 0;    // read bytes/s with `threads` threads
  // Read bytes/s one thread reaches; bandwidth with t threads is
  // min(memory_bandwidth, t * this). 0 = unknown (treated as bandwidth / threads).
  double memory_bandwidth_per_thread = 0;
  // KV bytes/s CPU decode attention reads; 0 = unknown (use memory_bandwidth).
  double attention_bandwidth = 0;
  double op_overhead_s = 0;       // fixed cost of one CPU operator call
};

struct LinkSpec {
  double h2d_bandwidth = 0;   // host-to-device bytes/s from pinned memory
  double h2d_latency_s = 0;   // fixed cost of one copy
  double d2h_bandwidth = 0;
  double d2h_latency_s = 0;
};

struct HardwareProfile {
  std::string name;    // e.g. "t4-xeon-24c"
  std::string source;  // where the figures come from: "measured on HOST", a citation
  GpuSpec gpu;
  CpuSpec cpu;
  LinkSpec link;

  bool has_gpu() const { return gpu.count > 0; }

  // Positive figures where they are needed, counts and sizes in range. The
  // message names the field.
  absl::Status Validate() const;

  // The same machine with only `threads` CPU threads: compute scales with the
  // thread count, memory bandwidth as min(all-thread figure, threads x
  // per-thread figure). threads must be in [1, cpu.threads].
  absl::StatusOr<HardwareProfile> WithCpuThreads(int threads) const;

  // The same machine with the GPU memory capped at `bytes` (a large GPU
  // standing in for a moderate one, --gpu-memory-budget); clamped to
  // [0, the GPU's memory].
  HardwareProfile WithGpuMemory(int64_t bytes) const;

  // Effective figures with the unknowns resolved as documented above.
  double CpuBandwidthPerThread() const;
  double CpuAttentionBandwidth() const;
};

// JSON <-> profile. Field names and units are documented in the .cc; unknown
// fields are an error (a misspelt key must not silently read as 0).
absl::StatusOr<HardwareProfile> HardwareProfileFromJson(const nlohmann::json& j);
nlohmann::json HardwareProfileToJson(const HardwareProfile& p);

// Reads a profile file (JSON with // and /* */ comments allowed) and
// validates it. Errors name the file.
absl::StatusOr<HardwareProfile> LoadHardwareProfile(const std::string& path);
// Writes atomically (temporary file, then rename).
absl::Status SaveHardwareProfile(const HardwareProfile& p, const std::string& path);

// Where this machine's measured profile of one kind ("host": the host
// device, "gpu": a gpu_worker's) is cached: $TANDEM_CACHE_DIR or
// ~/.cache/tandem, then profiles/<hostname>-<key>-<kind>.json, where key is
// a hash of the CPU model string and the online CPU count.
std::string MachineProfileCachePath(std::string_view kind = "host");

}  // namespace tandem

#endif  // TANDEM_COMMON_HARDWARE_PROFILE_H_
