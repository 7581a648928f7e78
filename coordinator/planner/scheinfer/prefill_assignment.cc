#include "coordinator/planner/scheinfer/prefill_assignment.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/planner/scheinfer/cost_model.h"
#include "coordinator/planner/scheinfer/rate_solver.h"

namespace tandem::planner::scheinfer {

absl::StatusOr<PrefillAssigner> PrefillAssigner::Create(const ModelConfig& config,
                                                        const HardwareProfile& hw,
                                                        std::vector<RunningMlpSplit> splits) {
  if (static_cast<int64_t>(splits.size()) != config.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("prefill assignment: ", splits.size(),
                                                   " layer splits for a model of ",
                                                   config.num_layers, " layers"));
  }
  for (const RunningMlpSplit& s : splits) {
    if (!(s.cc >= 0 && s.cc < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefill assignment: a CC share of ", s.cc, " is not in [0, 1)"));
    }
  }
  if (!hw.has_gpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("prefill assignment needs a GPU in the hardware profile ('", hw.name,
                     "' has none)"));
  }
  TANDEM_ASSIGN_OR_RETURN(ModelCost m, ModelCost::Create(config));
  return PrefillAssigner(std::move(m), hw, std::move(splits));
}

absl::StatusOr<int64_t> PrefillAssigner::GpuTokens(int64_t tokens) {
  if (tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefill assignment: ", tokens, " tokens"));
  }
  if (auto it = solved_.find(tokens); it != solved_.end()) return it->second;
  const double bpe = m_.options().weight_bytes_per_element;
  TANDEM_ASSIGN_OR_RETURN(CostModel model, CostModelFromProfile(hw_, bpe, static_cast<double>(tokens)));
  // Layers of one split share their lines: one group each, counted.
  std::map<std::pair<double, bool>, PrefillGroup> groups;
  const ModelConfig& c = m_.config();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const RunningMlpSplit& s = splits_[static_cast<size_t>(l)];
    if (c.IsMoeLayer(l) || s.cc <= kShareEpsilon) continue;  // nothing to assign
    auto [it, inserted] = groups.try_emplace({s.cc, s.streamed});
    if (inserted) {
      const Split split{s.streamed ? 0.0 : 1.0 - s.cc, s.streamed ? 1.0 - s.cc : 0.0, s.cc};
      it->second = PrefillGroup{model, PrefillLayerWork(m_, hw_, l, tokens).shape, split, 0};
    }
    it->second.count += 1;
  }
  int64_t n_g = 0;
  if (!groups.empty()) {
    std::vector<PrefillGroup> list;
    for (auto& [key, g] : groups) list.push_back(g);
    TANDEM_ASSIGN_OR_RETURN(TokenAssignment ta, SolvePrefillTokens(list, tokens));
    n_g = ta.gpu_tokens;
  }
  solved_.emplace(tokens, n_g);
  return n_g;
}

}  // namespace tandem::planner::scheinfer
