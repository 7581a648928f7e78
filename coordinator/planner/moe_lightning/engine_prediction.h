// The performance model's prediction for one of the engine's own steps at a
// placement that is given, not searched: `tandem bench --device cuda` prints
// it beside each measured figure, so the planner's figures can be checked
// against a real run.
//
// What the engine runs with a weight budget (EngineOptions::
// weight_budget_bytes) is MoE-Lightning's policy point with attention and
// the FFN on the GPU (A_g = F_g = 1), all KV on the GPU (r_c = 1), one
// micro-batch (μ = N = the step's sequences), and the weights past the
// budget paged in a layer at a time ahead of use (weight_pager.h: the whole
// FFN of a streamed layer, every expert, as the model's D3 pages are). The
// engine streams whole FFNs of the last layers where the model spreads
// (1 − r_w) over every layer; both move the same bytes per step, and with
// the pager two layers ahead the copies overlap the resident layers'
// compute as the model's per-layer max assumes.
#ifndef TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_ENGINE_PREDICTION_H_
#define TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_ENGINE_PREDICTION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "coordinator/planner/cost/model_cost.h"

namespace tandem::planner::ml {

struct StepPrediction {
  double seconds = 0;         // one step (a prefill, or one decode step)
  double tokens_per_s = 0;    // prompt tokens, or decode tokens of the batch
  std::string bottleneck;     // the costliest layer kind's binding resource
  double weights_gpu_fraction = 0;  // r_w the step was predicted at
};

// r_w of an engine that streams `streamed_bytes` of its layers' weights per
// step (the FFNs of its streamed layers) and keeps the rest: the fraction
// of ModelCost's layer weights resident. InvalidArgument when
// `streamed_bytes` is negative or more than the layers hold.
absl::StatusOr<double> ResidentFraction(const ModelCost& model, double streamed_bytes);

// One decode step of `batch` sequences, each token attending over `keys`
// cached keys (its own included; >= 1), at r_w.
absl::StatusOr<StepPrediction> PredictDecodeStep(const ModelCost& model,
                                                 const HardwareProfile& hw,
                                                 double weights_gpu_fraction, int64_t batch,
                                                 double keys);

// The prefill of one sequence's `prompt_tokens` in one step, at r_w.
absl::StatusOr<StepPrediction> PredictPrefill(const ModelCost& model, const HardwareProfile& hw,
                                              double weights_gpu_fraction,
                                              int64_t prompt_tokens);

}  // namespace tandem::planner::ml

#endif  // TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_ENGINE_PREDICTION_H_
