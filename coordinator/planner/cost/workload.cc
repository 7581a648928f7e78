#include "coordinator/planner/cost/workload.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tandem::planner {

absl::Status Workload::Validate() const {
  if (prompt_len < 1) return absl::InvalidArgumentError("workload: prompt length must be at least 1");
  if (gen_len < 1) return absl::InvalidArgumentError("workload: generation length must be at least 1");
  if (max_prompt_len != 0 && max_prompt_len < prompt_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workload: longest prompt (", max_prompt_len, ") is shorter than the average (",
        prompt_len, ")"));
  }
  if (max_batch < 0) return absl::InvalidArgumentError("workload: max batch must be >= 0");
  if (objective == Objective::kThroughputUnderItlSlo && !(slo_itl_s > 0 && std::isfinite(slo_itl_s))) {
    return absl::InvalidArgumentError(
        "workload: the online objective needs a positive inter-token latency SLO");
  }
  return absl::OkStatus();
}

}  // namespace tandem::planner
