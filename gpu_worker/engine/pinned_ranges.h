// The host memory a device pins (page-locks) so that weight copies from it
// run as DMA: the spans of the weights streamed before use (ScheInfer's CG,
// MoE-Lightning's paged weights, the expert cache's host copies), widened
// to whole pages and merged. Pinning registers each range once: two
// registrations of the same page fail (CUDA refuses overlapping ranges), so
// the ranges must be disjoint, and adjacent spans make one range.
#ifndef TANDEM_GPU_WORKER_ENGINE_PINNED_RANGES_H_
#define TANDEM_GPU_WORKER_ENGINE_PINNED_RANGES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

struct HostRange {
  uintptr_t begin = 0;
  size_t bytes = 0;
  friend bool operator==(const HostRange&, const HostRange&) = default;
};

// `spans` widened outward to multiples of `page` (a power of two), sorted,
// and merged where they overlap or touch. Empty spans are dropped.
std::vector<HostRange> PageAlignedRanges(std::vector<HostRange> spans, size_t page);

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_PINNED_RANGES_H_
