// Linear (oneDNN GEMM) throughput at decode and prefill batch sizes.
//   ninja -C build tandem_ops_bench && build/cpu_worker/ops/tandem_ops_bench
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/dtype.h"
#include "cpu_worker/ops/linear.h"

namespace tandem::ops {
namespace {

constexpr int64_t kN = 2048, kK = 2048;

void BM_Linear(benchmark::State& state, ComputeType type) {
  if (type == ComputeType::kBF16 && !CpuHasBf16()) {
    state.SkipWithError("no AVX512-BF16 (or TANDEM_CPU_ISA=f32)");
    return;
  }
  const int64_t m = state.range(0);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * kK)), y(static_cast<size_t>(m * kN));
  for (auto& v : x) v = dist(rng);
  std::vector<float> wf(static_cast<size_t>(kN * kK));
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    wf[i] = dist(rng);
    wb[i] = F32ToBf16(wf[i]);
  }
  TensorView view;
  view.name = "bench";
  view.shape = {kN, kK};
  if (type == ComputeType::kBF16) {
    view.dtype = DType::kBF16;
    view.data = wb.data();
    view.nbytes = kN * kK * 2;
  } else {
    view.dtype = DType::kF32;
    view.data = wf.data();
    view.nbytes = kN * kK * 4;
  }
  auto w = LinearWeight::Create(view, type);
  if (!w.ok()) {
    state.SkipWithError("LinearWeight::Create failed");
    return;
  }
  for (auto _ : state) {
    Linear(x.data(), m, *w, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(m) * kN * kK;
  const double bytes = static_cast<double>(view.nbytes) + 4.0 * m * (kK + kN);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// M = 1 and 16: decode batches (1 takes SmallBatchLinear, 16 oneDNN);
// 512: a prefill chunk.
BENCHMARK_CAPTURE(BM_Linear, f32, ComputeType::kF32)->Arg(1)->Arg(16)->Arg(512)->UseRealTime();
BENCHMARK_CAPTURE(BM_Linear, bf16, ComputeType::kBF16)->Arg(1)->Arg(16)->Arg(512)->UseRealTime();

}  // namespace
}  // namespace tandem::ops

BENCHMARK_MAIN();
