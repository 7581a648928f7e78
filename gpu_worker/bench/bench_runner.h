// `tandem bench` end to end: the machine first (bandwidth and GEMM peaks
// through the engine's own kernels), then the model (a checkpoint, or a
// synthetic one written to a temporary directory and removed afterwards):
// CPU decode attention alone, prompt processing, generation and batched
// decode, each against its roofline.
#ifndef TANDEM_GPU_WORKER_BENCH_BENCH_RUNNER_H_
#define TANDEM_GPU_WORKER_BENCH_BENCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cpu_worker/ops/linear.h"
#include "gpu_worker/bench/attention_bench.h"
#include "gpu_worker/bench/bench_report.h"
#include "gpu_worker/bench/engine_bench.h"
#include "gpu_worker/bench/synthetic_model.h"
#include "gpu_worker/engine/device.h"

namespace tandem::bench {

struct BenchOptions {
  std::string model_path;                              // used when `synthetic` is empty
  std::optional<SyntheticModelSpec> synthetic;         // write and benchmark this model
  ops::ComputeType compute = ops::ComputeType::kBF16;  // honoured for bf16 weights
  // The engine's device (null: the host device) and its name for the report.
  DeviceFactory device;
  std::string device_name = "host";
  // EngineOptions::weight_budget_bytes: 0 keeps every weight resident.
  int64_t weight_budget_bytes = 0;
  int repeats = 5;
  int warmup = 1;
  int64_t bandwidth_bytes = int64_t{1} << 30;
  int64_t gemm_size = 2048;         // M = N = K of the f32/bf16 peaks; N = K of int8 (M too
                                    // where the int8 kernel takes prefill)
  EngineBenchOptions engine;        // repeats/warmup overwritten from above
  AttentionBenchOptions attention;  // likewise
  // Progress lines ("measuring ..."), e.g. to stderr; may be empty.
  std::function<void(const std::string&)> progress;
};

absl::StatusOr<BenchReport> RunBench(const BenchOptions& options);

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_BENCH_RUNNER_H_
