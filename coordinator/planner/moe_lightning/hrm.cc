#include "coordinator/planner/moe_lightning/hrm.h"

#include <algorithm>

namespace tandem::planner::ml {

std::string_view RoofName(Roof r) {
  switch (r) {
    case Roof::kCompute:
      return "compute";
    case Roof::kLevelMemory:
      return "memory";
    case Roof::kLink:
      return "link";
  }
  return "unknown";
}

double AttainableOnLevel(const RooflineLevel& level, double intensity) {
  if (!(intensity > 0)) return 0;
  return std::min(level.peak_flops, level.bandwidth * intensity);
}

double AttainableFetched(const HierarchicalRoofline& h,
                         double intensity_compute, double intensity_home) {
  if (!(intensity_home > 0)) {
    // Nothing comes over the link (the data is all on level i already):
    // Eq. 7 degenerates to Eq. 8.
    return AttainableOnLevel(h.compute, intensity_compute);
  }
  return std::min(AttainableOnLevel(h.compute, intensity_compute),
                  h.link_bandwidth * intensity_home);
}

Roof BindingRoof(const HierarchicalRoofline& h, double intensity_compute,
                 double intensity_home) {
  const double compute = h.compute.peak_flops;
  const double memory = h.compute.bandwidth * intensity_compute;
  const double link =
      intensity_home > 0 ? h.link_bandwidth * intensity_home : compute + memory;
  if (compute <= memory && compute <= link) return Roof::kCompute;
  if (memory <= link) return Roof::kLevelMemory;
  return Roof::kLink;
}

double TurningPointP1(const HierarchicalRoofline& h, double intensity_home) {
  if (!(h.link_bandwidth > 0)) return 0;
  return AttainableOnLevel(h.home, intensity_home) / h.link_bandwidth;
}

double TurningPointP2(const HierarchicalRoofline& h, double intensity_compute) {
  if (!(h.link_bandwidth > 0)) return 0;
  return AttainableOnLevel(h.compute, intensity_compute) / h.link_bandwidth;
}

double BalanceIntensityHome(const HierarchicalRoofline& h,
                            double intensity_compute) {
  if (!(h.link_bandwidth > 0)) return 0;
  return h.compute.bandwidth * intensity_compute / h.link_bandwidth;
}

bool FetchBeatsHome(const HierarchicalRoofline& h, double intensity_compute,
                    double intensity_home) {
  return AttainableFetched(h, intensity_compute, intensity_home) >
         AttainableOnLevel(h.home, intensity_home);
}

double BalanceMicroBatches(double link_seconds_per_layer,
                           double gpu_seconds_per_micro_batch) {
  if (!(gpu_seconds_per_micro_batch > 0)) return 0;
  return link_seconds_per_layer / gpu_seconds_per_micro_batch;
}

}  // namespace tandem::planner::ml
