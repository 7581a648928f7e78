// Everything `tandem bench` measured, and its two renderings: a table for
// people and JSON for scripts (the same figures; the JSON names every field
// so a script never parses the table).
#ifndef TANDEM_GPU_WORKER_BENCH_BENCH_REPORT_H_
#define TANDEM_GPU_WORKER_BENCH_BENCH_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/hardware_profile.h"
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
  double streamed_bytes = 0;    // their FFN weights' bytes on the device, copied each step
  ModelConfig config;
  ModelCosts costs;
  double write_seconds = 0;  // synthetic only
  double load_seconds = 0;
  // Bytes of the model files mapped on 2 MiB pages after the engine's runs
  // (mapped_file.h); -1 where /proc does not say.
  int64_t huge_page_bytes = -1;
};

// The planner's prediction of one engine figure (MoE-Lightning's
// performance model at the engine's own placement; the CLI fills it, as
// the planner is the coordinator's and this library is the worker's).
struct PredictedFigure {
  std::string figure;       // as the table labels it: "pp N=512", "decode B=16 ctx=128"
  double measured = 0;      // tokens/s, the figure's median
  double predicted = 0;     // tokens/s
  std::string bottleneck;   // the resource the model says binds: gpu, h2d, d2h, launch, chain
};

struct PlannerPrediction {
  std::string profile;              // the hardware profile's name
  std::string profile_source;       // where its figures come from
  double weights_gpu_fraction = 0;  // r_w of the engine's placement
  std::vector<PredictedFigure> figures;
};

struct BenchReport {
  perf::MachineInfo machine;
  int repeats = 0;
  int warmup = 0;
  PeakFigure bandwidth;        // before the model's figures
  PeakFigure bandwidth_after;  // again after them: the machine's load drifts
  PeakFigure gemm_f32, gemm_bf16, gemm_int8;
  // The int8 kernels on Q4_0 weights: fewer loads per weight than Q8_0's,
  // so another rate; models of Q4_0 and Q4_1 weights are scored against it.
  PeakFigure gemm_int8_q4;
  Peaks roofline;  // what every figure is scored against (figure.h)
  ModelReport model;
  EngineFigures engine;
  std::vector<Figure> attention;
  // The engine's device measured by its own profiler (HBM, PCIe, GEMM
  // peaks; the CPU side is the machine's figures above). Absent for the
  // host device.
  std::optional<HardwareProfile> device_profile;
  // Absent without a profile with a GPU (the device's, or --hardware).
  std::optional<PlannerPrediction> prediction;
};

// The labels the table gives the engine's figures ("pp N=512", "tg ctx=128
// +32", "decode B=16 ctx=128"), which the prediction's rows repeat.
std::string PpLabel(const Figure& f);
std::string TgLabel(const Figure& f);
std::string DecodeLabel(const Figure& f);

nlohmann::ordered_json ReportJson(const BenchReport& r);
std::string ReportTable(const BenchReport& r);

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_BENCH_REPORT_H_
