// The two plans without any offloading, the baselines every other family is
// measured against: the whole model on the GPU (GPU_RESIDENT, when it fits;
// several GPUs count as one with their memory, bandwidth and FLOPs added,
// as MoE-Lightning's optimizer treats tensor parallelism), and the whole
// model on the CPU through the host device (HOST_DEVICE, the machine has no
// GPU or the model fits in neither).
#ifndef TANDEM_COORDINATOR_PLANNER_SEARCH_SINGLE_DEVICE_PLAN_H_
#define TANDEM_COORDINATOR_PLANNER_SEARCH_SINGLE_DEVICE_PLAN_H_

#include "absl/status/statusor.h"
#include "coordinator/planner/sim/family_plan.h"

namespace tandem::planner {

// FailedPrecondition when the machine has no GPU or the weights plus one
// sequence's KV do not fit in GPU memory.
absl::StatusOr<FamilyPlan> PlanGpuResident(const PlanInput& in);

// Every layer on the CPU; FailedPrecondition when the weights plus one
// sequence's KV do not fit in host memory.
absl::StatusOr<FamilyPlan> PlanHostDevice(const PlanInput& in);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SEARCH_SINGLE_DEVICE_PLAN_H_
