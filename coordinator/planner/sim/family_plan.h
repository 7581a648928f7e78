// What every schedule family's solver returns: the policy (with its
// prediction filled in) and the simulated decode step behind the prediction,
// so `tandem plan --trace` can show the schedule.
#ifndef TANDEM_COORDINATOR_PLANNER_SIM_FAMILY_PLAN_H_
#define TANDEM_COORDINATOR_PLANNER_SIM_FAMILY_PLAN_H_

#include "common/hardware_profile.h"
#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/cost/workload.h"
#include "coordinator/planner/sim/step_simulator.h"
#include "proto/policy.pb.h"

namespace tandem::planner {

struct PlanInput {
  const ModelCost* model = nullptr;
  const HardwareProfile* hardware = nullptr;  // GPU memory already capped by any budget
  const Workload* workload = nullptr;
};

struct FamilyPlan {
  proto::Policy policy;   // family, placement, batching, prediction
  StepGraph decode_step;  // the simulated decode step (or the layers of it simulated)
  SimResult decode_sim;
};

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SIM_FAMILY_PLAN_H_
