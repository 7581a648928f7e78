// Software prefetch for the kernels that stream weights from DRAM once per
// call (the single-row GEMVs), and the cache level it fills on this host.
// The level matters more than the distance: on an Emerald Rapids VM lines
// fetched 1 KiB ahead into L1 made a cold pass ~15% faster, while on an AMD
// EPYC (Zen 4) VM the same prefetch into L1 read 15% below the plain read
// sweep and into L2 matched it (docs/PERFORMANCE.md). The AVX-512 kernels
// (bf16 direct path, quantized VNNI rows) take the level; the AVX2 quantized
// kernel keeps L1, as L2 measured the same for it there.
#ifndef TANDEM_CPU_WORKER_OPS_STREAM_PREFETCH_H_
#define TANDEM_CPU_WORKER_OPS_STREAM_PREFETCH_H_

#include "cpu_worker/ops/intrinsics.h"

namespace tandem::ops {

enum class PrefetchLevel { kL1, kL2 };

// L2 on AMD CPUs, L1 elsewhere; TANDEM_PREFETCH=l1 or =l2 overrides (other
// values are ignored). Probed and read once, at the first call.
PrefetchLevel StreamPrefetchLevel();

// "l1", "l2".
const char* PrefetchLevelName(PrefetchLevel level);

// Prefetches the line holding `p` into level L. Kernels take L as a template
// argument, chosen once per call by StreamPrefetchLevel().
template <PrefetchLevel L>
inline void PrefetchLine(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), L == PrefetchLevel::kL2 ? _MM_HINT_T1 : _MM_HINT_T0);
}

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_STREAM_PREFETCH_H_
