// What a gpu_worker needs of its device: the factory its engines run on
// and, for tensor parallelism, how the device's groups are named and
// joined. The host device leaves the group functions null: the coordinator
// names its shared-memory groups and the worker joins them itself
// (shm_all_reduce.h). device_spec.h makes one from a --device name.
#ifndef TANDEM_GPU_WORKER_SERVICE_WORKER_DEVICE_H_
#define TANDEM_GPU_WORKER_SERVICE_WORKER_DEVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "gpu_worker/engine/all_reduce.h"
#include "gpu_worker/engine/device.h"

namespace tandem {

struct WorkerDevice {
  std::string name = "host";
  DeviceFactory make;  // null: the host device
  // A fresh group id, made by rank 0's worker for the coordinator to hand
  // to every rank (NewTensorParallelGroup). Null: the coordinator names it.
  std::function<absl::StatusOr<std::string>()> new_group_id;
  // Joins the group `group_id` as `rank` of `size` (blocks until all have).
  // Null: the host device's shared-memory group.
  std::function<absl::StatusOr<std::unique_ptr<AllReduce>>(const std::string& group_id, int rank,
                                                           int size)>
      join_group;
  // Measures the device's side of the hardware profile (gpu and link).
  // Null: the worker measures the host device (its CPU kernels).
  std::function<absl::Status(HardwareProfile*)> measure;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_SERVICE_WORKER_DEVICE_H_
