// The table of schedule-family solvers the search runs, in one place so that
// adding a family is one line.
#ifndef TANDEM_COORDINATOR_PLANNER_SEARCH_FAMILY_SOLVERS_H_
#define TANDEM_COORDINATOR_PLANNER_SEARCH_FAMILY_SOLVERS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

struct FamilySolver {
  proto::ScheduleFamily family;
  absl::StatusOr<FamilyPlan> (*plan)(const PlanInput& in);
};

const std::vector<FamilySolver>& FamilySolvers();

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SEARCH_FAMILY_SOLVERS_H_
