// The device a worker or `tandem generate` runs its engine on, named on the
// command line: "host" (the CPU kernels), "cuda" or "cuda:N" (GPU N). A
// plain header: no CUDA types, so code outside gpu_worker/ can name GPUs.
#ifndef TANDEM_GPU_WORKER_DEVICE_SPEC_H_
#define TANDEM_GPU_WORKER_DEVICE_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "gpu_worker/engine/device.h"
#include "gpu_worker/service/worker_device.h"

namespace tandem {

// The factory for `spec`; null for "host" (the engine's default).
// InvalidArgument for a malformed name, Unimplemented for "cuda" in a build
// without CUDA, FailedPrecondition when the GPU is not visible (checked
// now, so a worker fails at start rather than at its first load).
absl::StatusOr<DeviceFactory> DeviceFactoryFor(const std::string& spec);

// The factory with the tensor-parallel group functions of the device's
// kind (NCCL for GPUs, where the toolkit ships it), under the same rules.
absl::StatusOr<WorkerDevice> WorkerDeviceFor(const std::string& spec);

// True when this build has the CUDA device.
bool BuiltWithCuda();

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_DEVICE_SPEC_H_
