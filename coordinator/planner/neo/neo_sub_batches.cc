#include "coordinator/planner/neo/neo_sub_batches.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/planner/cost/roofline.h"
#include "coordinator/planner/neo/neo_costs.h"
#include "coordinator/planner/neo/neo_iteration.h"

namespace tandem::planner {

struct NeoSubBatcher::State {
  State(ModelCost m, const HardwareProfile& h) : model(std::move(m)), hw(h) {}
  ModelCost model;
  HardwareProfile hw;
  std::unique_ptr<NeoCosts> costs;  // refers to model and hw
  neo::IterationCosts functions;
  int layers = 1;
};

NeoSubBatcher::NeoSubBatcher(std::unique_ptr<State> s) : s_(std::move(s)) {}
NeoSubBatcher::~NeoSubBatcher() = default;

absl::StatusOr<std::unique_ptr<NeoSubBatcher>> NeoSubBatcher::Create(const ModelConfig& config,
                                                                      const HardwareProfile& hw) {
  TANDEM_RETURN_IF_ERROR(CheckGpuAndLink(hw, "Neo sub-batches"));
  if (!(hw.CpuAttentionBandwidth() > 0)) {
    return absl::InvalidArgumentError(
        "Neo sub-batches: the profile has no CPU memory bandwidth for attention");
  }
  TANDEM_ASSIGN_OR_RETURN(ModelCost m, ModelCost::Create(config));
  auto s = std::make_unique<State>(std::move(m), hw);
  s->costs = std::make_unique<NeoCosts>(s->model, s->hw);
  s->functions = s->costs->Functions();
  s->layers = static_cast<int>(config.num_layers);
  return std::unique_ptr<NeoSubBatcher>(new NeoSubBatcher(std::move(s)));
}

absl::StatusOr<StepSubBatches> NeoSubBatcher::Split(
    absl::Span<const StepSequenceShape> step) const {
  // PlanIteration's ids are the sequences' indices in the step.
  std::vector<neo::PrefillRequest> prefills;
  std::vector<neo::DecodeRequest> decodes;
  bool any_cpu_decode = false;
  for (size_t i = 0; i < step.size(); ++i) {
    const StepSequenceShape& q = step[i];
    if (q.tokens < 1 || q.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Neo sub-batches: sequence ", i, " has ",
                                                     q.tokens, " tokens at ", q.start_pos));
    }
    const int64_t id = static_cast<int64_t>(i);
    if (q.tokens > 1) {
      prefills.push_back({id, q.start_pos + q.tokens});
    } else {
      decodes.push_back({id, q.start_pos + 1, q.cpu_kv ? neo::KvLocation::kCpu
                                                       : neo::KvLocation::kGpu});
      any_cpu_decode = any_cpu_decode || q.cpu_kv;
    }
  }
  StepSubBatches out;
  for (size_t i = 0; i < step.size(); ++i) out.order.push_back(i);
  if (!any_cpu_decode) return out;
  TANDEM_ASSIGN_OR_RETURN(neo::IterationPlan plan,
                          neo::PlanIteration(prefills, decodes, s_->functions, s_->layers));
  if (!plan.pipelined) return out;
  out.order.clear();
  for (const auto* ids : {&plan.batch0.prefill_ids, &plan.batch0.gpu_decode_ids,
                          &plan.batch0.cpu_decode_ids}) {
    for (int64_t id : *ids) out.order.push_back(static_cast<size_t>(id));
  }
  const int64_t first = static_cast<int64_t>(out.order.size());
  for (const auto* ids : {&plan.batch1.cpu_decode_ids, &plan.deferred_ids}) {
    for (int64_t id : *ids) out.order.push_back(static_cast<size_t>(id));
  }
  if (out.order.size() != step.size()) {
    return absl::InternalError(absl::StrCat("Neo sub-batches: the plan places ", out.order.size(),
                                            " of ", step.size(), " sequences"));
  }
  const int64_t second = static_cast<int64_t>(step.size()) - first;
  if (first > 0) out.sizes.push_back(first);
  if (second > 0) out.sizes.push_back(second);
  if (out.sizes.size() < 2) out.sizes.clear();
  return out;
}

}  // namespace tandem::planner
