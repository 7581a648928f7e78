// A description of the host for benchmark reports: CPU model, cores,
// memory, the instruction-set extensions the kernels may use (as the
// kernels' own probe sees them, and as the kernel's /proc/cpuinfo lists
// them, which also names AMX-INT8 that the probe does not track) and the
// OpenMP settings the figures were taken under.
#ifndef TANDEM_CPU_WORKER_PERF_MACHINE_INFO_H_
#define TANDEM_CPU_WORKER_PERF_MACHINE_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::perf {

struct MachineInfo {
  std::string cpu_model;                   // /proc/cpuinfo "model name" ("" if unknown)
  int64_t logical_cpus = 0;                // online CPUs
  int64_t omp_threads = 0;                 // OpenMP threads the kernels use
  int64_t memory_bytes = 0;                // physical memory
  int64_t l3_bytes = 0;                    // one L3 as the kernel reports it (0 if unknown)
  std::string probed_features;             // ops::CpuFeaturesString of the kernels' own probe
  std::vector<std::string> cpuinfo_flags;  // avx512*, avx_vnni, amx* from /proc/cpuinfo
  std::string kernel_isa;                  // level of the hand-written kernels (ops::MaxKernelIsa)
  bool bf16_gemm = false;                  // ops::CpuHasBf16(): bf16 weights run bf16 GEMMs
  std::string stream_prefetch;             // cache level the GEMV prefetch fills ("l1", "l2")
  std::string packed_prefetch;             // the packed quantized kernel's level ("l1", "l2")
  std::string omp_wait_policy;             // $OMP_WAIT_POLICY ("" if unset)
  std::string gomp_spincount;              // $GOMP_SPINCOUNT ("" if unset)
};

MachineInfo DescribeMachine();

// The size of the largest level-3 cache among `cache_dir`'s index*/
// entries (Linux: /sys/devices/system/cpu/cpu0/cache), 0 if none is listed
// or readable. Preferred to glibc's sysconf(_SC_LEVEL3_CACHE_SIZE), which
// derives the size from CPUID and reported 320 MiB for the 32 MiB L3 of a
// 2-core AMD EPYC VM.
int64_t L3BytesFromSysfs(const std::string& cache_dir);

}  // namespace tandem::perf

#endif  // TANDEM_CPU_WORKER_PERF_MACHINE_INFO_H_
