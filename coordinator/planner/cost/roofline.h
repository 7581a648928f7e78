// Roofline time of a kernel (the longer of its compute and its memory
// traffic, plus fixed launch costs), PCIe copy times, and the check that a
// profile has the figures they divide by. The schedule families' cost
// models share these so that a kernel or a copy costs the same in every
// family.
#ifndef TANDEM_COORDINATOR_PLANNER_COST_ROOFLINE_H_
#define TANDEM_COORDINATOR_PLANNER_COST_ROOFLINE_H_

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/hardware_profile.h"

namespace tandem::planner {

// max(flops / peak_flops, bytes / bandwidth). No guard against a zero peak
// or bandwidth: callers validate the profile first.
inline double RooflineSeconds(double flops, double peak_flops, double bytes,
                              double bandwidth) {
  return std::max(flops / peak_flops, bytes / bandwidth);
}

// `kernels` GPU kernels moving `bytes` and doing `flops` in all: the
// roofline at bf16 peak and HBM bandwidth, never below the launch cost of
// the kernels (launches are asynchronous, so a run of small kernels goes at
// the rate the host issues them).
inline double GpuKernelSeconds(double flops, double bytes,
                               const HardwareProfile& hw, int kernels = 1) {
  return std::max(RooflineSeconds(flops, hw.gpu.bf16_flops, bytes,
                                  hw.gpu.memory_bandwidth),
                  kernels * hw.gpu.launch_overhead_s);
}

// A copy of `bytes` over the PCIe link, host to device and device to host:
// bandwidth plus the per-copy latency; nothing to copy costs nothing.
inline double H2dSeconds(double bytes, const HardwareProfile& hw) {
  return bytes > 0 ? bytes / hw.link.h2d_bandwidth + hw.link.h2d_latency_s : 0;
}
inline double D2hSeconds(double bytes, const HardwareProfile& hw) {
  return bytes > 0 ? bytes / hw.link.d2h_bandwidth + hw.link.d2h_latency_s : 0;
}

// OK when `hw` has the figures GpuKernelSeconds and the link copies divide
// by (a GPU, its bf16 FLOP/s and memory bandwidth, both PCIe bandwidths);
// FailedPrecondition otherwise, the message prefixed with `family`.
absl::Status CheckGpuAndLink(const HardwareProfile& hw,
                             absl::string_view family);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_COST_ROOFLINE_H_
