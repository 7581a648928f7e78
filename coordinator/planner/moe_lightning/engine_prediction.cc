#include "coordinator/planner/moe_lightning/engine_prediction.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/planner/cost/workload.h"
#include "coordinator/planner/moe_lightning/performance_model.h"

namespace tandem::planner::ml {
namespace {

// The engine's step as the model's options see it: pages DMA'd straight
// from the host store (pinned_host_weights), one prompt's hidden states
// staying on the device between layers (the engine's prefill is one step on
// one device).
ModelOptions EngineModelOptions() {
  ModelOptions o;
  o.prefill_hidden_on_gpu = true;
  return o;
}

// The policy point of an engine step of `batch` sequences.
PolicyPoint EnginePoint(double r_w, int64_t batch) {
  PolicyPoint p;
  p.batch_size = batch;
  p.micro_batch_size = batch;
  p.attention_on_gpu = true;
  p.ffn_on_gpu = true;
  p.weights_gpu_fraction = r_w;
  p.kv_gpu_fraction = 1;
  return p;
}

absl::Status CheckFraction(double r_w) {
  if (!(r_w >= 0 && r_w <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the resident weight fraction %g is not in [0, 1]", r_w));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> ResidentFraction(const ModelCost& model, double streamed_bytes) {
  double layers = 0;
  for (int64_t l = 0; l < model.config().num_layers; ++l) layers += model.layer_weight_bytes(l);
  if (!(layers > 0)) return absl::InvalidArgumentError("the model has no layer weights");
  if (!(streamed_bytes >= 0) || streamed_bytes > layers * (1 + 1e-12)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%g streamed bytes: the layers hold %g", streamed_bytes, layers));
  }
  return std::clamp(1.0 - streamed_bytes / layers, 0.0, 1.0);
}

absl::StatusOr<StepPrediction> PredictDecodeStep(const ModelCost& model,
                                                 const HardwareProfile& hw,
                                                 double weights_gpu_fraction, int64_t batch,
                                                 double keys) {
  TANDEM_RETURN_IF_ERROR(CheckFraction(weights_gpu_fraction));
  if (batch < 1 || !(keys >= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a decode step of %d sequences over %g keys", batch, keys));
  }
  // The model's decode context is prompt + gen/2: a prompt one short of the
  // keys (at least 1) and the generated length that makes up the rest.
  Workload w;
  w.prompt_len = std::max<int64_t>(1, static_cast<int64_t>(std::floor(keys)) - 1);
  w.gen_len = std::max<int64_t>(
      1, std::llround(2 * (keys - static_cast<double>(w.prompt_len))));
  w.max_batch = batch;
  TANDEM_ASSIGN_OR_RETURN(PerformanceModel pm,
                          PerformanceModel::Create(&model, &hw, &w, EngineModelOptions()));
  const PolicyPoint p = EnginePoint(weights_gpu_fraction, batch);
  const Estimate e = pm.Evaluate(p);
  StepPrediction s;
  s.seconds = e.decode_step_s;
  s.tokens_per_s = s.seconds > 0 ? static_cast<double>(batch) / s.seconds : 0;
  s.bottleneck = e.bottleneck;
  s.weights_gpu_fraction = weights_gpu_fraction;
  return s;
}

absl::StatusOr<StepPrediction> PredictPrefill(const ModelCost& model, const HardwareProfile& hw,
                                              double weights_gpu_fraction,
                                              int64_t prompt_tokens) {
  TANDEM_RETURN_IF_ERROR(CheckFraction(weights_gpu_fraction));
  if (prompt_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("a prefill of %d tokens", prompt_tokens));
  }
  Workload w;
  w.prompt_len = prompt_tokens;
  w.gen_len = 1;
  w.max_batch = 1;
  TANDEM_ASSIGN_OR_RETURN(PerformanceModel pm,
                          PerformanceModel::Create(&model, &hw, &w, EngineModelOptions()));
  StepPrediction s;
  s.seconds = pm.PrefillSeconds(EnginePoint(weights_gpu_fraction, 1), &s.bottleneck);
  s.tokens_per_s = s.seconds > 0 ? static_cast<double>(prompt_tokens) / s.seconds : 0;
  s.weights_gpu_fraction = weights_gpu_fraction;
  return s;
}

}  // namespace tandem::planner::ml
