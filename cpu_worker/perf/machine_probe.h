// Measurements of the host's peaks through the kernels the engine and the
// cpu_worker run: memory read bandwidth (all OpenMP threads), the memcpy
// bandwidth of one thread, GEMM throughput of ops::Linear in f32, bf16 and
// on int8 (Q8_0) weights, and the per-call overhead of a tiny Linear. Each
// function returns one sample per repeat so that callers choose the
// statistic: the start-up profiler keeps the best, `tandem bench` the median.
#ifndef TANDEM_CPU_WORKER_PERF_MACHINE_PROBE_H_
#define TANDEM_CPU_WORKER_PERF_MACHINE_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::perf {

// GB/s (1e9 bytes) of a read-only sweep over a `bytes` buffer by all OpenMP
// threads, each over its own contiguous part (placed by first touch from
// the same thread) as eight concurrent sequential streams, plain and (with
// AVX-512) with software prefetch at the GEMV kernels' level
// (stream_prefetch.h); each sweep counts the faster of the two. One value
// per repeat, after `warmup` sweeps; a repeat of a buffer swept in under
// 20 ms sweeps it for 20 ms and keeps the fastest sweep (see the .cc). The
// buffer should be several times the last-level cache for a DRAM figure.
absl::StatusOr<std::vector<double>> ReadBandwidthGbs(int64_t bytes, int warmup, int repeats);

// ReadBandwidthGbs's buffer, kept for sampling again and again (`tandem
// bench` samples the bandwidth around each figure).
class ReadSweep {
 public:
  // Allocates and first-touches `bytes` (>= 64).
  static absl::StatusOr<ReadSweep> Create(int64_t bytes);

  // One GB/s value per repeat, after `warmup` sweeps, as ReadBandwidthGbs.
  // `repeats` > 0, `warmup` >= 0.
  std::vector<double> Measure(int warmup, int repeats) const;

  int64_t bytes() const { return n_ * 8; }

 private:
  ReadSweep(std::unique_ptr<uint64_t[]> words, int64_t n) : words_(std::move(words)), n_(n) {}
  void Sweep(bool prefetch) const;

  std::unique_ptr<uint64_t[]> words_;
  int64_t n_ = 0;
};

// How ReadBandwidthGbs reads on this host, for reports: "read sweep, all
// threads, 8 streams each, plain or prefetched into l2".
std::string ReadSweepDescription();

// GB/s of a single-threaded memcpy of `bytes` (bytes copied per second):
// what a host-to-"device" copy costs on the host device.
absl::StatusOr<std::vector<double>> CopyBandwidthGbs(int64_t bytes, int warmup, int repeats);

enum class GemmKind {
  kF32,   // f32 weights, oneDNN f32 GEMM
  kBF16,  // bf16 weights: oneDNN bf16 (AVX512-BF16/AMX) where the CPU has it, else f32
  kInt8,    // Q8_0 weights: the int8 (VNNI/AVX2) kernels, at the batches they take
  kInt8Q4,  // Q4_0 weights on the same kernels: fewer loads per weight, another rate
};

struct GemmMeasurement {
  int64_t m = 0, n = 0, k = 0;
  std::string path;            // what actually ran, for the report
  std::vector<double> gflops;  // 2*m*n*k / seconds / 1e9, one per repeat
};

// y[m, n] = x[m, k] · W[n, k]^T through ops::Linear, W built in the kind's
// storage. For kInt8 and kInt8Q4, m must be one the int8 kernel takes
// (Int8KernelTakesRows; larger batches dequantize to a bf16/f32 GEMM, which
// is not an int8 figure): InvalidArgument otherwise, as for non-positive
// sizes.
absl::StatusOr<GemmMeasurement> MeasureGemm(GemmKind kind, int64_t m, int64_t n, int64_t k,
                                            int warmup, int repeats);

// Rows up to which ops::Linear runs Q8_0 weights, as the host device loads
// them, on the int8 kernels in decode.
int64_t Int8KernelMaxRows();
// Whether ops::Linear runs a batch of m rows of Q8_0 weights, as the host
// device loads them, on the int8 kernels: up to Int8KernelMaxRows(), or any
// m where the weights are packed for the int8 kernel at load (prefill
// included, ops::internal::QuantPacksHere).
bool Int8KernelTakesRows(int64_t m);

// Microseconds per call of a 1-row Linear on a 16x16 f32 weight (the host
// device's "kernel launch"), averaged over 1000 calls per repeat.
absl::StatusOr<std::vector<double>> LinearCallOverheadUs(int warmup, int repeats);

}  // namespace tandem::perf

#endif  // TANDEM_CPU_WORKER_PERF_MACHINE_PROBE_H_
