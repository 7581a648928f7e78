#include "coordinator/planner/search/policy_search.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/planner/search/family_solvers.h"

namespace tandem::planner {

std::string FamilyName(proto::ScheduleFamily f) {
  switch (f) {
    case proto::GPU_RESIDENT: return "GPU-resident";
    case proto::SCHEINFER: return "ScheInfer";
    case proto::MOE_LIGHTNING: return "MoE-Lightning";
    case proto::KLOTSKI: return "Klotski";
    case proto::HYBRIMOE: return "HybriMoE";
    case proto::NEO: return "Neo";
    case proto::HOST_DEVICE: return "host device";
    default: return "unspecified";
  }
}

namespace {

double Throughput(const FamilyOutcome& o) {
  return o.plan.policy.prediction().throughput_tokens_per_s();
}
double Itl(const FamilyOutcome& o) {
  return o.plan.policy.prediction().inter_token_latency_seconds();
}

// Orders outcomes best first: feasible before infeasible; among feasible,
// those meeting the SLO first, by throughput; those missing it by latency.
bool Better(const FamilyOutcome& a, const FamilyOutcome& b) {
  if (a.status.ok() != b.status.ok()) return a.status.ok();
  if (!a.status.ok()) return a.family < b.family;
  if (a.meets_slo != b.meets_slo) return a.meets_slo;
  if (a.meets_slo) return Throughput(a) > Throughput(b);
  return Itl(a) < Itl(b);
}

}  // namespace

absl::StatusOr<SearchResult> SearchPolicy(const ModelCost& model, const HardwareProfile& hardware,
                                          const Workload& workload, const SearchOptions& options) {
  TANDEM_RETURN_IF_ERROR(workload.Validate());
  TANDEM_RETURN_IF_ERROR(hardware.Validate());
  if (options.gpu_memory_budget_bytes < 0) {
    return absl::InvalidArgumentError("GPU memory budget must be >= 0");
  }
  HardwareProfile hw = hardware;
  if (options.gpu_memory_budget_bytes > 0 && hw.has_gpu()) {
    hw = hw.WithGpuMemory(options.gpu_memory_budget_bytes);
  }
  PlanInput in{.model = &model, .hardware = &hw, .workload = &workload};

  SearchResult result;
  for (const FamilySolver& solver : FamilySolvers()) {
    FamilyOutcome o;
    o.family = solver.family;
    absl::StatusOr<FamilyPlan> plan = solver.plan(in);
    if (plan.ok()) {
      o.plan = *std::move(plan);
      o.plan.policy.set_family(solver.family);
      o.meets_slo = workload.objective != Objective::kThroughputUnderItlSlo ||
                    Itl(o) <= workload.slo_itl_s;
    } else {
      o.status = plan.status();
    }
    result.outcomes.push_back(std::move(o));
  }
  std::stable_sort(result.outcomes.begin(), result.outcomes.end(), Better);
  if (result.outcomes.empty() || !result.outcomes.front().status.ok()) {
    std::string why;
    for (const FamilyOutcome& o : result.outcomes) {
      absl::StrAppend(&why, "\n  ", FamilyName(o.family), ": ", o.status.message());
    }
    return absl::FailedPreconditionError(
        absl::StrCat("no schedule family can run this model on this machine:", why));
  }
  result.best = result.outcomes.front().plan;
  result.meets_slo = result.outcomes.front().meets_slo;
  return result;
}

}  // namespace tandem::planner
