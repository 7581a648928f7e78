// Everything `tandem bench` measured, and its two renderings: a table for
// people and JSON for scripts (the same figures; the JSON names every field
// so a script never parses the table).
#ifndef TANDEM_GPU_WORKER_BENCH_BENCH_REPORT_H_
#define TANDEM_GPU_WORKER_BENCH_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "cpu_worker/perf/machine_info.h"
#include "cpu_worker/perf/timing.h"
#include "gpu_worker/bench/engine_bench.h"
#include "gpu_worker/bench/figure.h"
#include "gpu_worker/bench/model_costs.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {

// A machine peak: bandwidth in GB/s or GEMM throughput in GFLOP/s.
struct PeakFigure {
  perf::Summary value;
  std::string path;             // what ran
  int64_t m = 0, n = 0, k = 0;  // GEMM shape
  int64_t bytes = 0;            // bandwidth buffer
};

struct ModelReport {
  std::string source;   // "synthetic dense", "synthetic moe", or the --model path
  std::string path;     // what was opened (a temporary directory for synthetic models)
  std::string format;   // "hf" or "gguf"
  std::string compute;  // the engine's GEMM dtype: "bf16" or "f32"
  std::string device = "host";  // the engine's device (device_spec.h names)
  int64_t streamed_layers = 0;  // layers whose FFN the weight budget left streamed
  ModelConfig config;
  ModelCosts costs;
  double write_seconds = 0;  // synthetic only
  double load_seconds = 0;
  // Bytes of the model files mapped on 2 MiB pages after the engine's runs
  // (mapped_file.h); -1 where /proc does not say.
  int64_t huge_page_bytes = -1;
};

struct BenchReport {
  perf::MachineInfo machine;
  int repeats = 0;
  int warmup = 0;
  PeakFigure bandwidth;        // before the model's figures
  PeakFigure bandwidth_after;  // again after them: the machine's load drifts
  PeakFigure gemm_f32, gemm_bf16, gemm_int8;
  Peaks roofline;  // what every figure is scored against (figure.h)
  ModelReport model;
  EngineFigures engine;
  std::vector<Figure> attention;
};

nlohmann::ordered_json ReportJson(const BenchReport& r);
std::string ReportTable(const BenchReport& r);

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_BENCH_REPORT_H_
