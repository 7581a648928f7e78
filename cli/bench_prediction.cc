#include "cli/bench_prediction.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/moe_lightning/engine_prediction.h"

namespace tandem::cli {
namespace {

// The bytes the engine's device keeps of each tensor: a GPU holds bf16
// weights (GGUF blocks dequantized at load) or f32 for f32 checkpoints;
// its KV and activations are f32 (cuda_device.h), as the host device's.
planner::CostOptions DeviceCostOptions(const bench::BenchReport& r) {
  planner::CostOptions o;
  o.weight_bytes_per_element = r.model.costs.weight_storage == "f32" ? 4 : 2;
  o.kv_bytes_per_element = 4;
  o.activation_bytes_per_element = 4;
  return o;
}

bench::PredictedFigure Row(std::string label, const bench::Figure& f,
                           const planner::ml::StepPrediction& p) {
  bench::PredictedFigure row;
  row.figure = std::move(label);
  row.measured = f.rate.median;
  row.predicted = p.tokens_per_s;
  row.bottleneck = p.bottleneck;
  return row;
}

}  // namespace

HardwareProfile BenchMachineProfile(const bench::BenchReport& r, const HardwareProfile& device) {
  HardwareProfile hw;
  hw.name = absl::StrCat(device.gpu.name.empty() ? "device" : device.gpu.name, " + this host");
  hw.source = "measured by tandem bench: the device by its profiler, the CPU by the bench's "
              "bandwidth sweeps and GEMM peaks";
  hw.gpu = device.gpu;
  hw.link = device.link;
  hw.cpu.name = r.machine.cpu_model;
  hw.cpu.threads = static_cast<int>(std::max<int64_t>(1, r.machine.omp_threads));
  hw.cpu.memory_bytes = r.machine.memory_bytes;
  hw.cpu.memory_bandwidth = r.roofline.read_gbs * 1e9;
  hw.cpu.f32_flops = r.roofline.f32_gflops * 1e9;
  hw.cpu.bf16_flops = r.roofline.bf16_gflops * 1e9;
  hw.cpu.int8_ops = r.roofline.int8_gflops * 1e9;
  return hw;
}

absl::StatusOr<bench::PlannerPrediction> PredictBenchFigures(const bench::BenchReport& r,
                                                             const HardwareProfile& hw) {
  if (!hw.has_gpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "profile '", hw.name, "' has no GPU: the planner predicts the engine on a GPU"));
  }
  TANDEM_ASSIGN_OR_RETURN(planner::ModelCost model,
                          planner::ModelCost::Create(r.model.config, DeviceCostOptions(r)));
  // The weight pager streams the FFNs of the last layers (weight_pager.h).
  const int64_t layers = r.model.config.num_layers;
  double streamed = 0;
  for (int64_t l = std::max<int64_t>(0, layers - r.model.streamed_layers); l < layers; ++l) {
    streamed += model.ffn_weight_bytes(l);
  }
  TANDEM_ASSIGN_OR_RETURN(const double r_w, planner::ml::ResidentFraction(model, streamed));

  bench::PlannerPrediction out;
  out.profile = hw.name;
  out.profile_source = hw.source;
  out.weights_gpu_fraction = r_w;
  for (const bench::Figure& f : r.engine.pp) {
    TANDEM_ASSIGN_OR_RETURN(planner::ml::StepPrediction p,
                            planner::ml::PredictPrefill(model, hw, r_w, f.tokens));
    out.figures.push_back(Row(bench::PpLabel(f), f, p));
  }
  TANDEM_ASSIGN_OR_RETURN(planner::ml::StepPrediction tg,
                          planner::ml::PredictDecodeStep(model, hw, r_w, 1, r.engine.tg.keys));
  out.figures.push_back(Row(bench::TgLabel(r.engine.tg), r.engine.tg, tg));
  for (const bench::Figure& f : r.engine.decode) {
    TANDEM_ASSIGN_OR_RETURN(planner::ml::StepPrediction p,
                            planner::ml::PredictDecodeStep(model, hw, r_w, f.sequences, f.keys));
    out.figures.push_back(Row(bench::DecodeLabel(f), f, p));
  }
  return out;
}

}  // namespace tandem::cli
