// TestDevices() of a build without CUDA: the host device only.
#include "gpu_worker/host/host_device.h"
#include "gpu_worker/engine/testing/separate_memory_device.h"
#include "gpu_worker/engine/testing/test_devices.h"

namespace tandem::testing {

std::vector<TestDevice> TestDevices(std::string* why_no_gpu) {
  if (why_no_gpu != nullptr) *why_no_gpu = "built without CUDA";
  return {{"host",
           []() -> absl::StatusOr<std::unique_ptr<Device>> {
             return std::unique_ptr<Device>(new HostDevice());
           }},
          {"host_separate_memory", []() -> absl::StatusOr<std::unique_ptr<Device>> {
             return std::unique_ptr<Device>(new SeparateMemoryDevice());
           }}};
}

}  // namespace tandem::testing
