#include "gpu_worker/device_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

#ifdef TANDEM_HAVE_CUDA_DEVICE
#include "gpu_worker/cuda/cuda_device.h"
#include "gpu_worker/cuda/device_info.h"
#endif

namespace tandem {

bool BuiltWithCuda() {
#ifdef TANDEM_HAVE_CUDA_DEVICE
  return true;
#else
  return false;
#endif
}

absl::StatusOr<DeviceFactory> DeviceFactoryFor(const std::string& spec) {
  if (spec == "host") return DeviceFactory();
  int ordinal = 0;
  if (spec != "cuda") {
    if (!absl::StartsWith(spec, "cuda:") || !absl::SimpleAtoi(spec.substr(5), &ordinal) ||
        ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device \"", spec, "\": expected host, cuda or cuda:N"));
    }
  }
#ifdef TANDEM_HAVE_CUDA_DEVICE
  std::string why;
  const auto visible = cuda::ListDevices(&why);
  if (ordinal >= static_cast<int>(visible.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", spec, ": ", visible.size(), " GPU(s) visible", why.empty() ? "" : ": ", why));
  }
  return DeviceFactory([ordinal]() -> absl::StatusOr<std::unique_ptr<Device>> {
    auto d = cuda::CudaDevice::Create(ordinal);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(*d));
  });
#else
  return absl::UnimplementedError(
      absl::StrCat("device ", spec, ": this build has no CUDA (nvcc was not found when it was "
                   "configured)"));
#endif
}

}  // namespace tandem
