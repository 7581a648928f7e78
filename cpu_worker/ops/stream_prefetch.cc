#include "cpu_worker/ops/stream_prefetch.h"

#include <cstdlib>
#include <cstring>

#include "cpu_worker/ops/cpu_features.h"

namespace tandem::ops {

PrefetchLevel StreamPrefetchLevel() {
  static const PrefetchLevel level = [] {
    const char* v = std::getenv("TANDEM_PREFETCH");
    if (v != nullptr && std::strcmp(v, "l1") == 0) return PrefetchLevel::kL1;
    if (v != nullptr && std::strcmp(v, "l2") == 0) return PrefetchLevel::kL2;
    return HostCpuFeatures().amd ? PrefetchLevel::kL2 : PrefetchLevel::kL1;
  }();
  return level;
}

const char* PrefetchLevelName(PrefetchLevel level) {
  return level == PrefetchLevel::kL2 ? "l2" : "l1";
}

}  // namespace tandem::ops
