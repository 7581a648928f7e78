// Decode attention throughput (ops::AttendDecode) in KV bytes read per
// second: hot (the KV fits in L2, so the figure is the kernel's own speed),
// from L3 (one sequence of 8 MiB: the kernel's speed over a long context)
// and cold (a 1 GiB cache read from DRAM, with its fraction of a read sweep
// of the same bytes taken beside each pass).
// The shapes are the synthetic models' (4 kv heads, group 4, 16-token
// blocks): head_dim 128 (dense) and 64 (MoE), and group 1 beside group 4 at
// head_dim 128: a quarter of the arithmetic over the same bytes, which
// tells how much of the cold rate the arithmetic costs (docs/PERFORMANCE.md).
// OMP_NUM_THREADS sets the thread count.
#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/ops/bench_sweep.h"

namespace tandem::ops {
namespace {

// Floats in memory mapped as the KV caches map theirs (HugePageArray:
// anonymous, huge pages advised), so the benchmark sees the same TLB reach.
struct MappedFloats {
  explicit MappedFloats(size_t n) : bytes(n * sizeof(float)) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    (void)madvise(m, bytes, MADV_HUGEPAGE);
    p = static_cast<float*>(m);
  }
  ~MappedFloats() {
    if (p != nullptr) munmap(p, bytes);
  }
  MappedFloats(const MappedFloats&) = delete;
  MappedFloats& operator=(const MappedFloats&) = delete;
  size_t bytes;
  float* p = nullptr;
};

constexpr int64_t kKvHeads = 4, kBlock = 16;

// Args: context (keys per sequence), sequences, head_dim, query heads per
// kv head.
void BM_AttendDecode(benchmark::State& state) {
  const int64_t ctx = state.range(0), seqs = state.range(1), head_dim = state.range(2);
  const int64_t group = state.range(3);
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const int64_t row = kKvHeads * head_dim, heads = kKvHeads * group;
  const int64_t elems = seqs * blocks_per_seq * kBlock * row;
  // Uniform values from a cheap generator: 2^28 normal draws for the cold
  // cache took longer than the measurement (values do not change the work).
  MappedFloats k(static_cast<size_t>(elems)), v(static_cast<size_t>(elems));
  if (k.p == nullptr || v.p == nullptr) {
    state.SkipWithError("cannot map the KV cache");
    return;
  }
  uint32_t lcg = 1;
  auto next = [&lcg] {
    lcg = lcg * 1664525u + 1013904223u;
    return static_cast<float>(lcg >> 8) / static_cast<float>(1 << 24) - 0.5f;
  };
  for (int64_t i = 0; i < elems; ++i) {
    k.p[i] = next();
    v.p[i] = next();
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // Sequences' blocks interleaved, as a cache shared by many sequences
  // hands them out.
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(seqs));
  for (int64_t b = 0; b < blocks_per_seq; ++b) {
    for (int64_t s = 0; s < seqs; ++s) {
      tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(b * seqs + s));
    }
  }
  PagedKvLayer kv{k.p, v.p, kBlock, kKvHeads, head_dim};
  std::vector<float> q(static_cast<size_t>(seqs * heads * head_dim)), out(q.size());
  for (float& x : q) x = dist(rng);
  std::vector<DecodeQuery> queries;
  for (int64_t s = 0; s < seqs; ++s) {
    queries.push_back({q.data() + s * heads * head_dim, tables[static_cast<size_t>(s)].data(), ctx,
                       out.data() + s * heads * head_dim});
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const double bytes = 2.0 * static_cast<double>(seqs * ctx * row) * sizeof(float);
  // A cold pass is followed by a read sweep of the same bytes
  // (bench_sweep.h): the kernel's fraction of it is the figure to compare
  // by, as the VM's bandwidth moves between minutes.
  const bool cold = bytes >= double{1 << 28};
  const int64_t words = elems * static_cast<int64_t>(sizeof(float)) / 8;
  double kernel_s = 0, sweep_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    AttendDecode(queries.data(), seqs, heads, kv, scale);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    const auto t1 = std::chrono::steady_clock::now();
    if (cold) {
      benchmark::DoNotOptimize(bench::SweepRead(reinterpret_cast<const uint64_t*>(k.p), words, 8));
      benchmark::DoNotOptimize(bench::SweepRead(reinterpret_cast<const uint64_t*>(v.p), words, 8));
    }
    const auto t2 = std::chrono::steady_clock::now();
    kernel_s += std::chrono::duration<double>(t1 - t0).count();
    sweep_s += std::chrono::duration<double>(t2 - t1).count();
  }
  const double passes = static_cast<double>(state.iterations());
  state.counters["KV_GB/s"] = bytes * passes / kernel_s * 1e-9;
  if (cold) {
    const double swept = 2.0 * static_cast<double>(elems) * sizeof(float);
    state.counters["sweep_GB/s"] = swept * passes / sweep_s * 1e-9;
    state.counters["of_sweep"] = (bytes / kernel_s) / (swept / sweep_s);
  }
}
// Hot: 2 x 128 keys x 2 KiB = 512 KiB of K and V at head_dim 128. From
// L2 and L3: 1 and 2 MiB (256 and 512 keys; with OMP_NUM_THREADS=1, the
// kernel's arithmetic rate on a small CPU), 8 MiB. Cold: 1 GiB.
BENCHMARK(BM_AttendDecode)
    ->ArgNames({"ctx", "seqs", "hd", "group"})
    ->Args({128, 1, 128, 4})
    ->Args({2048, 1, 128, 4})
    ->Args({4096, 1, 64, 4})
    ->Args({4096, 64, 128, 4})
    ->Args({256, 1, 64, 4})
    ->Args({256, 1, 128, 4})
    ->Args({512, 1, 128, 4})
    ->Args({4096, 128, 64, 4})
    ->Args({2048, 1, 128, 1})
    ->Args({4096, 64, 128, 1})
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace
}  // namespace tandem::ops
