#include "gpu_worker/device_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

#ifdef TANDEM_HAVE_CUDA_DEVICE
#include "gpu_worker/cuda/cuda_device.h"
#include "gpu_worker/cuda/cuda_profile.h"
#include "gpu_worker/cuda/device_info.h"
#endif
#ifdef TANDEM_HAVE_NCCL
#include "gpu_worker/cuda/nccl_all_reduce.h"
#endif

namespace tandem {

bool BuiltWithCuda() {
#ifdef TANDEM_HAVE_CUDA_DEVICE
  return true;
#else
  return false;
#endif
}

namespace {

// The GPU ordinal of "cuda" or "cuda:N"; InvalidArgument for other names.
absl::StatusOr<int> CudaOrdinal(const std::string& spec) {
  int ordinal = 0;
  if (spec != "cuda" && (!absl::StartsWith(spec, "cuda:") ||
                         !absl::SimpleAtoi(spec.substr(5), &ordinal) || ordinal < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", spec, "\": expected host, cuda or cuda:N"));
  }
  return ordinal;
}

}  // namespace

absl::StatusOr<WorkerDevice> WorkerDeviceFor(const std::string& spec) {
  WorkerDevice d;
  d.name = spec;
  auto make = DeviceFactoryFor(spec);
  if (!make.ok()) return make.status();
  d.make = *std::move(make);
  if (spec == "host") return d;
  auto ordinal = CudaOrdinal(spec);
  if (!ordinal.ok()) return ordinal.status();
#ifdef TANDEM_HAVE_CUDA_DEVICE
  d.measure = [ordinal = *ordinal](HardwareProfile* hw) {
    cuda::CudaProfileOptions po;
    po.device = ordinal;
    return cuda::MeasureCudaProfile(po, hw);
  };
#endif
#ifdef TANDEM_HAVE_NCCL
  d.new_group_id = [] { return cuda::NewNcclGroupId(); };
  d.join_group = [ordinal = *ordinal](const std::string& id, int rank, int size)
      -> absl::StatusOr<std::unique_ptr<AllReduce>> {
    auto g = cuda::NcclAllReduce::Create(id, rank, size, ordinal);
    if (!g.ok()) return g.status();
    return std::unique_ptr<AllReduce>(std::move(*g));
  };
#else
  d.join_group = [](const std::string&, int, int) -> absl::StatusOr<std::unique_ptr<AllReduce>> {
    return absl::UnimplementedError(
        "tensor parallelism across GPUs needs NCCL, which this build did not find");
  };
#endif
  return d;
}

absl::StatusOr<DeviceFactory> DeviceFactoryFor(const std::string& spec) {
  if (spec == "host") return DeviceFactory();
  auto parsed = CudaOrdinal(spec);
  if (!parsed.ok()) return parsed.status();
  const int ordinal = *parsed;
#ifdef TANDEM_HAVE_CUDA_DEVICE
  std::string why;
  const auto visible = cuda::ListDevices(&why);
  if (!cuda::Lists(visible, ordinal)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", spec, ": ", visible.size(), " GPU(s) visible", why.empty() ? "" : ": ", why));
  }
  return DeviceFactory([ordinal]() -> absl::StatusOr<std::unique_ptr<Device>> {
    auto d = cuda::CudaDevice::Create(ordinal);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(*d));
  });
#else
  (void)ordinal;
  return absl::UnimplementedError(
      absl::StrCat("device ", spec, ": this build has no CUDA (nvcc was not found when it was "
                   "configured)"));
#endif
}

}  // namespace tandem
