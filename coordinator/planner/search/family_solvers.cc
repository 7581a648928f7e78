#include "coordinator/planner/search/family_solvers.h"

#include "coordinator/planner/hybrimoe/hybrimoe_planner.h"
#include "coordinator/planner/klotski/klotski_planner.h"
#include "coordinator/planner/moe_lightning/moe_lightning_plan.h"
#include "coordinator/planner/neo/neo_planner.h"
#include "coordinator/planner/scheinfer/scheinfer_plan.h"
#include "coordinator/planner/search/single_device_plan.h"

namespace tandem::planner {

const std::vector<FamilySolver>& FamilySolvers() {
  // Lambdas pick the default-options overload of each solver.
  static const auto* solvers = new std::vector<FamilySolver>{
      {proto::GPU_RESIDENT, [](const PlanInput& in) { return PlanGpuResident(in); }},
      {proto::SCHEINFER, [](const PlanInput& in) { return PlanScheInfer(in); }},
      {proto::MOE_LIGHTNING, [](const PlanInput& in) { return PlanMoeLightning(in); }},
      {proto::KLOTSKI, [](const PlanInput& in) { return PlanKlotski(in); }},
      {proto::HYBRIMOE, [](const PlanInput& in) { return PlanHybriMoe(in); }},
      {proto::NEO, [](const PlanInput& in) { return PlanNeo(in); }},
      {proto::HOST_DEVICE, [](const PlanInput& in) { return PlanHostDevice(in); }},
  };
  return *solvers;
}

}  // namespace tandem::planner
