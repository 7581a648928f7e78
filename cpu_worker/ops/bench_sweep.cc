#include "cpu_worker/ops/bench_sweep.h"

#include <omp.h>

#include <algorithm>

#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/intrinsics.h"

namespace tandem::ops::bench {
namespace {

template <int kStreams>
__attribute__((target("avx512f"))) uint64_t SumSliceAvx512(const uint64_t* p,
                                                           int64_t n) {
  const int64_t len = n / kStreams / 8 * 8;  // words per stream, whole vectors
  __m512i acc[kStreams];
  for (auto& a : acc) a = _mm512_setzero_si512();
  for (int64_t i = 0; i < len; i += 8) {
#pragma GCC unroll 8
    for (int s = 0; s < kStreams; ++s) {
      acc[s] = _mm512_add_epi64(acc[s], _mm512_loadu_si512(p + s * len + i));
    }
  }
  uint64_t sum = 0;
  for (const auto& a : acc)
    sum += static_cast<uint64_t>(_mm512_reduce_add_epi64(a));
  return sum;
}

uint64_t SumSlice(const uint64_t* p, int64_t n, int streams) {
  if (HostCpuFeatures().avx512f) {
    return streams == 1 ? SumSliceAvx512<1>(p, n) : SumSliceAvx512<8>(p, n);
  }
  uint64_t acc[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  }
  uint64_t sum = 0;
  for (uint64_t a : acc) sum += a;
  return sum;
}

}  // namespace

uint64_t SweepRead(const uint64_t* p, int64_t n, int streams) {
  uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min(n, id * chunk);
    total += SumSlice(p + begin, std::min(n, begin + chunk) - begin, streams);
  }
  return total;
}

}  // namespace tandem::ops::bench
