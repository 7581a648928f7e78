// The read sweep the micro-benchmarks compare kernels with: all OpenMP
// threads sum disjoint slices of a buffer, each its slice as 1 or 8
// sequential streams side by side. On a shared VM the bandwidth moves by
// half between minutes, so a kernel's rate as a fraction of a sweep of the
// same bytes taken beside it is the figure to compare kernels by.
#ifndef TANDEM_CPU_WORKER_OPS_BENCH_SWEEP_H_
#define TANDEM_CPU_WORKER_OPS_BENCH_SWEEP_H_

#include <cstdint>

namespace tandem::ops::bench {

// The sum of `n` words at p, read by all threads, `streams` (1 or 8)
// streams each.
uint64_t SweepRead(const uint64_t* p, int64_t n, int streams);

}  // namespace tandem::ops::bench

#endif  // TANDEM_CPU_WORKER_OPS_BENCH_SWEEP_H_
