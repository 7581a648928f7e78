#include "coordinator/planner/cost/roofline.h"

#include "absl/strings/str_cat.h"

namespace tandem::planner {

absl::Status CheckGpuAndLink(const HardwareProfile& hw,
                             absl::string_view family) {
  if (!hw.has_gpu() || !(hw.gpu.bf16_flops > 0) ||
      !(hw.gpu.memory_bandwidth > 0) || !(hw.link.h2d_bandwidth > 0) ||
      !(hw.link.d2h_bandwidth > 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat(family,
                     ": needs a GPU with bf16 FLOP/s, memory bandwidth and "
                     "PCIe bandwidths"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::planner
