#include "cpu_worker/ops/stream_prefetch.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cpu_worker/ops/cpu_features.h"

namespace tandem::ops {

PrefetchLevel ChooseStreamPrefetchLevel(const char* env, bool amd) {
  if (env != nullptr && std::strcmp(env, "l1") == 0) return PrefetchLevel::kL1;
  if (env != nullptr && std::strcmp(env, "l2") == 0) return PrefetchLevel::kL2;
  return amd ? PrefetchLevel::kL2 : PrefetchLevel::kL1;
}

PrefetchLevel ChoosePackedPrefetchLevel(const char* env, bool amd, int family) {
  // Zen 5 and later default to L1, as other vendors do.
  return ChooseStreamPrefetchLevel(env, amd && family < 0x1a);
}

PrefetchLevel StreamPrefetchLevel() {
  static const PrefetchLevel level =
      ChooseStreamPrefetchLevel(std::getenv("TANDEM_PREFETCH"), HostCpuFeatures().amd);
  return level;
}

PrefetchLevel PackedPrefetchLevel() {
  static const PrefetchLevel level = ChoosePackedPrefetchLevel(
      std::getenv("TANDEM_PREFETCH"), HostCpuFeatures().amd, HostCpuFeatures().family);
  return level;
}

// On the AMD EPYC VM (BM_DecodeLayerSequence, bf16, the fraction of the
// read sweep beside it): items of 32 rows of 4 KiB read 0.74 of the sweep,
// 128 KiB-2 MiB items 0.82-0.95, 1 MiB 0.95.
int64_t StreamItemRows(int64_t n, int64_t row_bytes, int64_t min_rows, bool parallel) {
  constexpr int64_t kItemBytes = int64_t{1} << 20;
  int64_t rows = std::max(min_rows, kItemBytes / std::max<int64_t>(row_bytes, 1));
  if (parallel) {
    const int64_t items = 2 * static_cast<int64_t>(omp_get_max_threads());
    rows = std::min(rows, std::max(min_rows, (n + items - 1) / items));
  }
  return rows;
}

const char* PrefetchLevelName(PrefetchLevel level) {
  return level == PrefetchLevel::kL2 ? "l2" : "l1";
}

}  // namespace tandem::ops
