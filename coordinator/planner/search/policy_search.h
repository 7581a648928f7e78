// The policy search: runs every schedule family's solver on the model, the
// machine and the workload, and keeps the best policy for the objective —
// the highest throughput (offline), or the highest throughput whose
// inter-token latency meets the SLO (online). The other families' best
// policies are kept as runners-up so `tandem plan` can show why the winner won.
#ifndef TANDEM_COORDINATOR_PLANNER_SEARCH_POLICY_SEARCH_H_
#define TANDEM_COORDINATOR_PLANNER_SEARCH_POLICY_SEARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

struct SearchOptions {
  // Caps the GPU memory of every GPU (a large GPU standing in for a
  // moderate one); 0 = the profile's.
  int64_t gpu_memory_budget_bytes = 0;
};

struct FamilyOutcome {
  proto::ScheduleFamily family = proto::SCHEDULE_FAMILY_UNSPECIFIED;
  absl::Status status;  // why the family has no plan (not OK), or OK
  FamilyPlan plan;      // valid when status is OK
  bool meets_slo = true;
};

struct SearchResult {
  FamilyPlan best;
  bool meets_slo = true;  // false: no family meets the SLO; best is the lowest-latency plan
  // Every family, the best first, then the other feasible ones by the
  // objective, then the infeasible ones with their reasons.
  std::vector<FamilyOutcome> outcomes;
};

// FailedPrecondition when no family can run the model on the machine (the
// message gives each family's reason); InvalidArgument for a bad workload.
absl::StatusOr<SearchResult> SearchPolicy(const ModelCost& model, const HardwareProfile& hardware,
                                          const Workload& workload, const SearchOptions& options);

std::string FamilyName(proto::ScheduleFamily f);  // "ScheInfer", "MoE-Lightning", ...

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SEARCH_POLICY_SEARCH_H_
