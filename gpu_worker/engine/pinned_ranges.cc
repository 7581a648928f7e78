#include "gpu_worker/engine/pinned_ranges.h"

#include <algorithm>

namespace tandem {

std::vector<HostRange> PageAlignedRanges(std::vector<HostRange> spans, size_t page) {
  const uintptr_t mask = static_cast<uintptr_t>(page) - 1;
  std::vector<HostRange> aligned;
  aligned.reserve(spans.size());
  for (const HostRange& s : spans) {
    if (s.bytes == 0) continue;
    const uintptr_t begin = s.begin & ~mask;
    const uintptr_t end = (s.begin + s.bytes + mask) & ~mask;
    aligned.push_back({begin, static_cast<size_t>(end - begin)});
  }
  std::sort(aligned.begin(), aligned.end(),
            [](const HostRange& a, const HostRange& b) { return a.begin < b.begin; });
  std::vector<HostRange> merged;
  for (const HostRange& r : aligned) {
    if (!merged.empty() && r.begin <= merged.back().begin + merged.back().bytes) {
      HostRange& m = merged.back();
      const uintptr_t end = std::max(m.begin + m.bytes, r.begin + r.bytes);
      m.bytes = static_cast<size_t>(end - m.begin);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace tandem
