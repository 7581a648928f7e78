// Software prefetch for the kernels that stream weights from DRAM once per
// call (the single-row GEMVs), and the cache level it fills on this host.
// The level matters more than the distance: on an Emerald Rapids VM lines
// fetched 1 KiB ahead into L1 made a cold pass ~15% faster, while on an AMD
// EPYC (Zen 4) VM the same prefetch into L1 read 15% below the plain read
// sweep and into L2 matched it (docs/PERFORMANCE.md). The AVX-512 kernels
// (bf16 direct path, quantized VNNI rows) take the level; the AVX2 quantized
// kernel keeps L1, as L2 measured the same for it there; the packed
// quantized kernel takes its own (PackedPrefetchLevel).
#ifndef TANDEM_CPU_WORKER_OPS_STREAM_PREFETCH_H_
#define TANDEM_CPU_WORKER_OPS_STREAM_PREFETCH_H_

#include <cstdint>

#include "cpu_worker/ops/intrinsics.h"

namespace tandem::ops {

enum class PrefetchLevel { kL1, kL2 };

// L2 on AMD CPUs, L1 elsewhere; TANDEM_PREFETCH=l1 or =l2 overrides (other
// values are ignored). Probed and read once, at the first call.
PrefetchLevel StreamPrefetchLevel();

// The level of the packed quantized kernel (quant_packed.h), whose cursor
// fetches a thread's stream 4 KiB ahead: as StreamPrefetchLevel, except on
// AMD family 0x1A (Zen 5) and later, where into L1 read 0.82-0.83 of the
// sweep against 0.77 into L2; on a Zen 4 VM (family 0x19) into L2 read
// 38-41 GB/s at one row of Q8_0 against 29-30 into L1 (docs/PERFORMANCE.md).
// TANDEM_PREFETCH overrides it too. Probed and read once.
PrefetchLevel PackedPrefetchLevel();

// The choices above from their inputs: `env` is $TANDEM_PREFETCH (null if
// unset), `amd` and `family` the CPU's (cpu_features.h).
PrefetchLevel ChooseStreamPrefetchLevel(const char* env, bool amd);
PrefetchLevel ChoosePackedPrefetchLevel(const char* env, bool amd, int family);

// "l1", "l2".
const char* PrefetchLevelName(PrefetchLevel level);

// Prefetches the line holding `p` into level L. Kernels take L as a template
// argument, chosen once per call by StreamPrefetchLevel().
template <PrefetchLevel L>
inline void PrefetchLine(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), L == PrefetchLevel::kL2 ? _MM_HINT_T1 : _MM_HINT_T0);
}

// Prefetches into L the lines from *cursor up to `target` (not past `end`),
// moving the cursor on: a thread's weight stream fetched ahead by the
// packed kernels, each line once.
template <PrefetchLevel L>
inline void FetchLinesUpTo(uintptr_t* cursor, uintptr_t target, uintptr_t end) {
  target = target < end ? target : end;
  for (; *cursor < target; *cursor += 64) PrefetchLine<L>(reinterpret_cast<const void*>(*cursor));
}

// One row of x (a single sequence's decode step) reads each weight row
// alone, so that a thread's rows are one sequential stream of bytes: several
// rows at once are as many streams a row apart, which DRAM serves far
// slower (docs/PERFORMANCE.md, "One weight row at a time"). The stream is
// fetched this many bytes ahead, across row ends, since the next rows are
// the next bytes.
inline constexpr int64_t kStreamAheadBytes = 4096;

// Weight rows per parallel item of such a stream: about 1 MiB of weight, so
// that a thread's stream seldom jumps to another place, but at least
// `min_rows`, and no more than makes two items per OpenMP thread when the
// call is `parallel`, so that a thread that loses a time slice on a shared
// machine can still be covered by the others.
int64_t StreamItemRows(int64_t n, int64_t row_bytes, int64_t min_rows, bool parallel);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_STREAM_PREFETCH_H_
