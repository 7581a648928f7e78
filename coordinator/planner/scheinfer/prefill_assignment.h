// ScheInfer's prefill token assignment re-solved for every prefill (digest
// §2.6, Eq. 15): the paper picks n_g per prompt, because the best n_g
// depends on the prompt's length T, keeping the decode-optimal split of the
// MLPs. A running server knows its split (which dense MLP rows its workers
// compute on the CPU, which layers' device rows are streamed) and the
// hardware; this answers n_g for each prefill step the coordinator sends.
#ifndef TANDEM_COORDINATOR_PLANNER_SCHEINFER_PREFILL_ASSIGNMENT_H_
#define TANDEM_COORDINATOR_PLANNER_SCHEINFER_PREFILL_ASSIGNMENT_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "common/model_config.h"
#include "coordinator/planner/cost/model_cost.h"

namespace tandem::planner::scheinfer {

// One dense layer's MLP as a worker runs it: `cc` of its intermediate rows
// on the CPU; the device's rows resident (GG) or streamed (CG).
struct RunningMlpSplit {
  double cc = 0;
  bool streamed = false;
};

class PrefillAssigner {
 public:
  // `splits[l]` for every layer (MoE layers' entries are ignored: their
  // experts are not split in rows). InvalidArgument for a split out of
  // range or a count that is not the model's; FailedPrecondition for a
  // profile without a GPU (the cost model needs one).
  static absl::StatusOr<PrefillAssigner> Create(const ModelConfig& config,
                                                const HardwareProfile& hw,
                                                std::vector<RunningMlpSplit> splits);

  // n_g in [0, tokens] for a prefill step of `tokens` rows; 0 when no layer
  // has CC rows. Memoised per `tokens` (the solve is a few breakpoints per
  // layer group; steps repeat their sizes).
  absl::StatusOr<int64_t> GpuTokens(int64_t tokens);

 private:
  PrefillAssigner(ModelCost m, HardwareProfile hw, std::vector<RunningMlpSplit> splits)
      : m_(std::move(m)), hw_(std::move(hw)), splits_(std::move(splits)) {}

  ModelCost m_;
  HardwareProfile hw_;
  std::vector<RunningMlpSplit> splits_;
  std::map<int64_t, int64_t> solved_;
};

}  // namespace tandem::planner::scheinfer

#endif  // TANDEM_COORDINATOR_PLANNER_SCHEINFER_PREFILL_ASSIGNMENT_H_
