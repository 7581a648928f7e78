// TestDevices() of a build with CUDA: the host device and each visible GPU.
#include "absl/strings/str_cat.h"
#include "gpu_worker/cuda/cuda_device.h"
#include "gpu_worker/cuda/device_info.h"
#include "gpu_worker/host/host_device.h"
#include "gpu_worker/engine/testing/separate_memory_device.h"
#include "gpu_worker/engine/testing/test_devices.h"

namespace tandem::testing {

std::vector<TestDevice> TestDevices(std::string* why_no_gpu) {
  std::vector<TestDevice> d = {
      {"host",
       []() -> absl::StatusOr<std::unique_ptr<Device>> {
         return std::unique_ptr<Device>(new HostDevice());
       }},
      {"host_separate_memory", []() -> absl::StatusOr<std::unique_ptr<Device>> {
         return std::unique_ptr<Device>(new SeparateMemoryDevice());
       }}};
  std::string why;
  for (const cuda::DeviceInfo& info : cuda::ListDevices(&why)) {
    const int ordinal = info.index;
    d.push_back({absl::StrCat("cuda", ordinal),
                 [ordinal]() -> absl::StatusOr<std::unique_ptr<Device>> {
                   auto c = cuda::CudaDevice::Create(ordinal);
                   if (!c.ok()) return c.status();
                   return std::unique_ptr<Device>(std::move(*c));
                 }});
  }
  if (why_no_gpu != nullptr) *why_no_gpu = d.size() > 2 ? "" : why;
  return d;
}

}  // namespace tandem::testing
