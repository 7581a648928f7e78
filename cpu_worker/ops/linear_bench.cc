// Linear throughput at decode and prefill batch sizes, for f32, bf16 and the
// GGUF block types, and the machine's read bandwidth to compare with.
//   ninja -C build tandem_ops_bench && build/cpu_worker/ops/tandem_ops_bench
// Decode (small m) streams the weight: its figure is weight bytes per second
// ("W_GB/s"). The "cold" variants cycle through enough copies of the weight
// (kColdBytes) that every pass reads it from DRAM, not from the L3 cache,
// which on servers holds a 4096 x 4096 matrix; compare them with
// BM_ReadBandwidth. OMP_NUM_THREADS sets the thread count.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "cpu_worker/ops/amx_linear.h"
#include "cpu_worker/ops/bench_sweep.h"
#include "cpu_worker/ops/bf16_dot_linear.h"
#include "cpu_worker/ops/bf16_packed.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/gemv.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/onednn_matmul.h"
#include "cpu_worker/ops/quant_gemv.h"
#include "cpu_worker/ops/quant_packed.h"
#include "cpu_worker/ops/widened_linear.h"

namespace tandem::ops {
namespace {

constexpr int64_t kN = 4096, kK = 4096;
// Well above the L3 of current servers (up to a few hundred MiB).
constexpr int64_t kColdBytes = int64_t{1} << 30;

// `copies` copies of one random [kN, kK] weight stored as `t`.
std::vector<std::vector<uint8_t>> MakeWeights(DType t, int copies) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(kN * kK));
  for (auto& v : wf) v = dist(rng);
  std::vector<std::vector<uint8_t>> w(static_cast<size_t>(copies));
  w[0].resize(static_cast<size_t>(DTypeBytes(t, kN * kK).value()));
  QuantizeFromF32(t, wf.data(), kN * kK, w[0].data());  // also f32 and bf16
  for (int c = 1; c < copies; ++c) w[static_cast<size_t>(c)] = w[0];
  return w;
}

// `data` as an [n, k] weight of dtype t.
TensorView View(DType t, const std::vector<uint8_t>& data, int64_t n = kN, int64_t k = kK) {
  TensorView v;
  v.name = "bench";
  v.dtype = t;
  v.shape = {n, k};
  v.data = data.data();
  v.nbytes = static_cast<int64_t>(data.size());
  return v;
}

// The timed loop of the Linear benchmarks: one call per iteration, the
// weights in turn (copies enough to read each from DRAM where cold).
void TimeLinearCalls(benchmark::State& state, const std::vector<float>& x, int64_t m,
                     const std::vector<LinearWeight>& w, std::vector<float>& y) {
  size_t next = 0;
  for (auto _ : state) {
    Linear(x.data(), m, w[next], nullptr, y.data());
    next = next + 1 == w.size() ? 0 : next + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

// Linear as the engine calls it (bf16 packed where the engine packs it).
// Args: m, cold (0/1).
void BM_Linear(benchmark::State& state, DType t) {
  const ComputeType prefer = t == DType::kF32                         ? ComputeType::kF32
                             : t == DType::kBF16 || t == DType::kF16 ? ComputeType::kBF16
                                                                      : ComputeType::kQuantized;
  const int64_t m = state.range(0);
  const bool cold = state.range(1) != 0;
  const int64_t bytes = DTypeBytes(t, kN * kK).value();
  const int copies = cold ? static_cast<int>((kColdBytes + bytes - 1) / bytes) : 1;
  const auto storage = MakeWeights(t, copies);
  std::vector<LinearWeight> w;
  for (const auto& s : storage) {
    auto lw = LinearWeight::Create(View(t, s), prefer, WeightLayout::kCpuPacked);
    if (!lw.ok()) {
      state.SkipWithError("LinearWeight::Create failed");
      return;
    }
    w.push_back(*lw);
  }
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * kK)), y(static_cast<size_t>(m * kN));
  for (auto& v : x) v = dist(rng);
  TimeLinearCalls(state, x, m, w, y);
  const double flops = 2.0 * static_cast<double>(m) * kN * kK;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_GB/s"] = benchmark::Counter(static_cast<double>(w[0].nbytes()) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(w[0].quantized()                             ? KernelIsaName(MaxKernelIsa())
                 : w[0].storage() == WeightStorage::kBF16Packed ? "bf16 packed"
                 : w[0].compute_type() == ComputeType::kBF16 ? "bf16"
                 : w[0].storage() == WeightStorage::kBF16    ? "bf16 widened to f32"
                 : w[0].storage() == WeightStorage::kF16     ? "f16 widened to f32"
                                                             : "f32");
}

// Q8_0 Linear on the shapes of `tandem bench --synthetic dense` (hidden
// 2048, ffn 5632, 16 heads / 4 KV heads of 128), cold, as a decode step of
// m sequences calls it: q, k and v as one [3072, 2048] weight, the output
// projection [2048, 2048], gate and up as one [11264, 2048], the down
// projection [2048, 5632]. Set beside BM_Linear/q8_0 (4096 x 4096) it shows
// what the engine's shapes cost the kernel. Args: m, n, k.
void BM_LinearShapeQ8(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n * k));
  for (auto& v : wf) v = dist(rng);
  std::vector<uint8_t> blocks(static_cast<size_t>(DTypeBytes(DType::kQ8_0, n * k).value()));
  QuantizeFromF32(DType::kQ8_0, wf.data(), n * k, blocks.data());
  // Copies of the blocks too, so that the weights are distinct (cold) where
  // they are not packed (in place) either.
  const int copies = static_cast<int>((kColdBytes + static_cast<int64_t>(blocks.size()) - 1) /
                                      static_cast<int64_t>(blocks.size()));
  const std::vector<std::vector<uint8_t>> storage(static_cast<size_t>(copies), blocks);
  std::vector<LinearWeight> w;
  for (const auto& b : storage) {
    auto lw = LinearWeight::Create(View(DType::kQ8_0, b, n, k), ComputeType::kQuantized,
                                   WeightLayout::kCpuPacked);
    if (!lw.ok()) {
      state.SkipWithError("LinearWeight::Create failed");
      return;
    }
    w.push_back(*lw);
  }
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (auto& v : x) v = dist(rng);
  TimeLinearCalls(state, x, m, w, y);
  state.counters["GOPS"] =
      benchmark::Counter(2.0 * static_cast<double>(m) * static_cast<double>(n * k) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearShapeQ8)
    ->ArgsProduct({{16}, {3072, 2048, 11264}, {2048}})
    ->Args({16, 2048, 5632})
    ->Args({16, 4096, 4096})
    ->ArgNames({"m", "n", "k"})
    ->UseRealTime()
    ->MinTime(0.5);

// m = 1: a decode step of one sequence; 4 .. 32: decode batches.
#define TANDEM_DECODE_ARGS \
  ArgsProduct({{1, 4, 8, 12, 16, 32}, {0, 1}})->ArgNames({"m", "cold"})->UseRealTime()->MinTime(0.5)
BENCHMARK_CAPTURE(BM_Linear, f32, DType::kF32)->TANDEM_DECODE_ARGS;
BENCHMARK_CAPTURE(BM_Linear, bf16, DType::kBF16)->TANDEM_DECODE_ARGS;
BENCHMARK_CAPTURE(BM_Linear, f16, DType::kF16)->TANDEM_DECODE_ARGS;
BENCHMARK_CAPTURE(BM_Linear, q8_0, DType::kQ8_0)->TANDEM_DECODE_ARGS;
BENCHMARK_CAPTURE(BM_Linear, q4_0, DType::kQ4_0)->TANDEM_DECODE_ARGS;
BENCHMARK_CAPTURE(BM_Linear, q4_1, DType::kQ4_1)->TANDEM_DECODE_ARGS;
// Prefill chunks (f32: what a GGUF weight computed as before it was kept
// quantized: dequantized to f32 at load).
#define TANDEM_PREFILL_ARGS \
  ArgsProduct({{64, 512}, {0}})->ArgNames({"m", "cold"})->UseRealTime()->MinTime(0.5)
BENCHMARK_CAPTURE(BM_Linear, f32, DType::kF32)->TANDEM_PREFILL_ARGS;
BENCHMARK_CAPTURE(BM_Linear, bf16, DType::kBF16)->TANDEM_PREFILL_ARGS;
BENCHMARK_CAPTURE(BM_Linear, f16, DType::kF16)->TANDEM_PREFILL_ARGS;
BENCHMARK_CAPTURE(BM_Linear, q8_0, DType::kQ8_0)->TANDEM_PREFILL_ARGS;
BENCHMARK_CAPTURE(BM_Linear, q4_0, DType::kQ4_0)->TANDEM_PREFILL_ARGS;

// The two ways to run a quantized weight at larger m, side by side: the
// int8 kernel tiled over the rows of x (arg path 0) and dequantized panels
// through oneDNN's GEMM (path 1). Warm weights.
void BM_QuantPath(benchmark::State& state, DType t) {
  const int64_t m = state.range(0);
  const bool gemm = state.range(1) != 0;
  const auto w = MakeWeights(t, 1);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * kK)), y(static_cast<size_t>(m * kN));
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    if (gemm) {
      internal::QuantLinearViaGemm(x.data(), m, w[0].data(), t, kN, kK, nullptr, y.data());
    } else {
      internal::QuantLinear(x.data(), m, w[0].data(), t, kN, kK, nullptr, y.data(), MaxKernelIsa());
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m) * kN * kK * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_QuantPath, q8_0, DType::kQ8_0)
    ->ArgsProduct({{4, 8, 16, 32, 64, 512}, {0, 1}})
    ->ArgNames({"m", "gemm"})
    ->UseRealTime()
    ->MinTime(0.5);
BENCHMARK_CAPTURE(BM_QuantPath, q4_0, DType::kQ4_0)
    ->ArgsProduct({{8, 16, 32, 64}, {0, 1}})
    ->ArgNames({"m", "gemm"})
    ->UseRealTime()
    ->MinTime(0.5);

// n activations drawn from N(0, 1), the same on every run.
std::vector<float> NormalInput(int64_t n) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

// GFLOP/s of an m-row product with the kN x kK weight, and GB/s of its
// `weight_bytes`, per iteration.
void ReportRates(benchmark::State& state, int64_t m, int64_t weight_bytes) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m) * kN * kK * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// Decode-sized batches on a quantized weight, cold (read from DRAM): the
// int8 kernel (arg path 0), dequantized panels through oneDNN's GEMM (path
// 1), dequantized items through the AMX kernel (path 2, AmxQuantLinear),
// through the AVX512-BF16 dot kernel (path 3, QuantDotLinear) and the
// blocks on AMX int8 tiles (path 4, AmxQuantInt8Linear). W_GB/s counts the
// blocks' bytes.
void BM_QuantSmallBatchPaths(benchmark::State& state, DType t) {
  const int64_t m = state.range(0);
  const int64_t path = state.range(1);
  if (path == 2 && !internal::AmxUsable()) {
    state.SkipWithError("AMX not usable here");
    return;
  }
  if (path == 3 && !internal::Bf16DotKernelRuns()) {
    state.SkipWithError("no AVX512-BF16 here");
    return;
  }
  if (path == 4 && !internal::AmxInt8Usable()) {
    state.SkipWithError("AMX-INT8 not usable here");
    return;
  }
  const int64_t bytes = DTypeBytes(t, kN * kK).value();
  const auto w = MakeWeights(t, static_cast<int>((kColdBytes + bytes - 1) / bytes));
  const std::vector<float> x = NormalInput(m * kK);
  std::vector<float> y(static_cast<size_t>(m * kN));
  size_t next = 0;
  for (auto _ : state) {
    const void* wp = w[next].data();
    if (path == 0) {
      internal::QuantLinear(x.data(), m, wp, t, kN, kK, nullptr, y.data(), MaxKernelIsa());
    } else if (path == 1) {
      internal::QuantLinearViaGemm(x.data(), m, wp, t, kN, kK, nullptr, y.data());
    } else if (path == 3) {
      internal::QuantDotLinear(x.data(), m, wp, t, kN, kK, nullptr, y.data());
    } else if (path == 4) {
      internal::AmxQuantInt8Linear(x.data(), m, wp, t, kN, kK, nullptr, y.data());
    } else {
      internal::AmxQuantLinear(x.data(), m, wp, t, kN, kK, nullptr, y.data());
    }
    next = next + 1 == w.size() ? 0 : next + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  ReportRates(state, m, bytes);
}
BENCHMARK_CAPTURE(BM_QuantSmallBatchPaths, q8_0, DType::kQ8_0)
    ->ArgsProduct({{1, 2, 4, 8, 9, 16, 24, 32}, {0, 1, 2, 3, 4}})
    ->ArgNames({"m", "path"})
    ->UseRealTime()
    ->MinTime(0.5);
BENCHMARK_CAPTURE(BM_QuantSmallBatchPaths, q4_0, DType::kQ4_0)
    ->ArgsProduct({{1, 8, 16, 24, 32}, {0, 1, 2, 3, 4}})
    ->ArgNames({"m", "path"})
    ->UseRealTime()
    ->MinTime(0.5);

// Where the bf16 small-batch kernel should hand over to oneDNN (linear.h:
// internal::SmallBatchMaxRows): the same cold weights through the kernel
// (arg path 0), oneDNN's GEMM with x rounded to bf16 (path 1) and oneDNN
// with the weight as source operand, x padded to 16 or 32 rows (path 2),
// the AMX kernel (path 3, amx_linear.h) and the AVX512-BF16 dot-product
// kernel (path 4, bf16_dot_linear.h). Where the CPU has no bf16 GEMMs
// (TANDEM_CPU_ISA=f32 or avx2 here) path 0 widens the weights in registers
// and path 5 in panels for oneDNN's f32 GEMM (widened_linear.h): where
// Linear switches between them (WidenedSmallBatchMaxRows). Path 6 is
// oneDNN's GEMM on the weight packed for it (PackBf16), which Linear runs
// for every batch where Bf16PacksHere holds before the kernel of its own,
// path 7 (bf16_packed.h), which reads the same bytes.
void BM_Bf16SmallBatchPaths(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int64_t path = state.range(1);
  if (path >= 1 && path <= 4 && !CpuHasBf16()) {
    state.SkipWithError("no AVX512-BF16 (or TANDEM_CPU_ISA=f32)");
    return;
  }
  if (path == 3 && !internal::AmxUsable()) {
    state.SkipWithError("AMX not usable here");
    return;
  }
  const int64_t bytes = kN * kK * 2;
  const auto w = MakeWeights(DType::kBF16, static_cast<int>((kColdBytes + bytes - 1) / bytes));
  std::vector<LinearWeight> packed;
  if (path == 6 || path == 7) {
    for (const auto& c : w) {
      auto lw = LinearWeight::Create(View(DType::kBF16, c), ComputeType::kBF16,
                                     WeightLayout::kCpuPacked);
      if (!lw.ok() || lw->storage() != WeightStorage::kBF16Packed) {
        state.SkipWithError("bf16 weights are not packed here (Bf16PacksHere)");
        return;
      }
      packed.push_back(*lw);
    }
  }
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * kK)), y(static_cast<size_t>(m * kN));
  for (auto& v : x) v = dist(rng);
  const int64_t cols = (m + 15) / 16 * 16;
  std::vector<uint16_t> xb(static_cast<size_t>(cols * kK), 0);
  size_t next = 0;
  for (auto _ : state) {
    const void* wp = w[next].data();
    if (path == 6) {
      Linear(x.data(), m, packed[next], nullptr, y.data());
    } else if (path == 7) {
      internal::PackedBf16Linear(x.data(), m, packed[next].data(), kN, kK, nullptr, y.data());
    } else if (path == 0) {
      internal::SmallBatchLinear(x.data(), m, wp, internal::GemvWeight::kBF16, kN, kK, nullptr,
                                 y.data());
    } else if (path == 5) {
      internal::WidenedLinear(x.data(), m, static_cast<const uint16_t*>(wp),
                              internal::GemvWeight::kBF16, kN, kK, nullptr, y.data());
    } else if (path == 4) {
      internal::Bf16DotLinear(x.data(), m, static_cast<const uint16_t*>(wp), kN, kK, nullptr,
                              y.data());
    } else if (path == 3) {
      internal::AmxLinear(x.data(), m, static_cast<const uint16_t*>(wp), kN, kK, nullptr,
                          y.data());
    } else {
      for (size_t i = 0; i < x.size(); ++i) xb[i] = F32ToBf16(x[i]);
      if (path == 1) {
        internal::OnednnMatmul(xb.data(), m, wp, kN, kK, nullptr, internal::MatmulType::kBF16,
                               y.data());
      } else {
        internal::OnednnMatmulWeightAsSrc(xb.data(), m, cols, static_cast<const uint16_t*>(wp), kN,
                                          kK, nullptr, y.data());
      }
    }
    next = next + 1 == w.size() ? 0 : next + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  ReportRates(state, m, bytes);
}
BENCHMARK(BM_Bf16SmallBatchPaths)
    ->ArgsProduct({{1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 512}, {0, 1, 2, 3, 4, 5, 6, 7}})
    ->ArgNames({"m", "path"})
    ->UseRealTime()
    ->MinTime(0.5);

// The packed bf16 kernel (bf16_packed.h) on a weight that stays in L2 (256
// x 1024, 512 KiB), one thread: its arithmetic rate without DRAM. Args: m.
void BM_PackedBf16Warm(benchmark::State& state) {
  const int64_t m = state.range(0);
  constexpr int64_t kWn = 256, kWk = 1024;
  if (!internal::PackedBf16KernelHere()) {
    state.SkipWithError("no AVX-512 here");
    return;
  }
  const std::vector<float> wf = NormalInput(kWn * kWk);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = F32ToBf16(wf[i]);
  std::vector<uint16_t> packed(static_cast<size_t>(internal::PackedBf16Elements(kWn, kWk)) + 32);
  auto* aligned =
      reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(packed.data()) + 63) / 64 * 64);
  internal::PackBf16(wb.data(), kWn, kWk, aligned);
  const std::vector<float> x = NormalInput(m * kWk);
  std::vector<float> y(static_cast<size_t>(m * kWn));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (auto _ : state) {
    internal::PackedBf16Linear(x.data(), m, aligned, kWn, kWk, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  omp_set_num_threads(threads);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m) * kWn * kWk * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PackedBf16Warm)->ArgName("m")->Arg(1)->Arg(4)->Arg(6)->Arg(12)->Arg(16)->Arg(32);

// The packed int8 kernel (quant_packed.h) on a Q8_0 weight that stays in
// L2 (128 x 4096, 544 KiB packed), one thread: its rate without DRAM, to
// set beside its cold rate (BM_Linear/q8_0, cold:1). Each call quantizes
// x as the engine's does (about 13% of the time at m = 1). Args: m.
void BM_PackedQuantWarm(benchmark::State& state) {
  const int64_t m = state.range(0);
  constexpr int64_t kWn = 128, kWk = 4096;
  if (!internal::QuantPacksHere()) {
    state.SkipWithError("no AVX512-VNNI here (or usable AMX, whose kernels read blocks in place)");
    return;
  }
  const std::vector<float> wf = NormalInput(kWn * kWk);
  std::vector<uint8_t> blocks(static_cast<size_t>(DTypeBytes(DType::kQ8_0, kWn * kWk).value()));
  QuantizeFromF32(DType::kQ8_0, wf.data(), kWn * kWk, blocks.data());
  const int64_t bytes = internal::PackedQuantBytes(DType::kQ8_0, kWn, kWk);
  std::vector<uint8_t> packed(static_cast<size_t>(bytes) + 64);
  auto* aligned =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(packed.data()) + 63) / 64 * 64);
  internal::PackQuant(DType::kQ8_0, blocks.data(), kWn, kWk, aligned);
  const std::vector<float> x = NormalInput(m * kWk);
  std::vector<float> y(static_cast<size_t>(m * kWn));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (auto _ : state) {
    internal::PackedQuantLinear(DType::kQ8_0, x.data(), m, aligned, kWn, kWk, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  omp_set_num_threads(threads);
  state.counters["GOPS"] = benchmark::Counter(2.0 * static_cast<double>(m) * kWn * kWk * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PackedQuantWarm)->ArgName("m")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32);

// The fixed cost of one Linear call: one row through a 64 x 64 weight,
// from L1, per storage (arg: 0 f32, 1 bf16 as the engine holds it, packed
// where Bf16PacksHere holds). A decode step makes about 7 calls a dense
// layer and 11 a MoE layer with 2 experts per token.
void BM_LinearCallOverhead(benchmark::State& state) {
  constexpr int64_t kDim = 64;
  const DType t = state.range(0) == 0 ? DType::kF32 : DType::kBF16;
  const std::vector<float> wf = NormalInput(kDim * kDim);
  std::vector<uint8_t> wb(static_cast<size_t>(DTypeBytes(t, kDim * kDim).value()));
  QuantizeFromF32(t, wf.data(), kDim * kDim, wb.data());
  auto lw = LinearWeight::Create(View(t, wb, kDim, kDim),
                                 t == DType::kF32 ? ComputeType::kF32 : ComputeType::kBF16,
                                 WeightLayout::kCpuPacked);
  if (!lw.ok()) {
    state.SkipWithError("LinearWeight::Create failed");
    return;
  }
  const std::vector<float> x = NormalInput(kDim);
  std::vector<float> y(kDim);
  for (auto _ : state) {
    Linear(x.data(), 1, *lw, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(lw->storage() == WeightStorage::kBF16Packed ? "bf16 packed"
                 : t == DType::kF32                          ? "f32"
                                                             : "bf16");
}
BENCHMARK(BM_LinearCallOverhead)->ArgName("bf16")->Arg(0)->Arg(1)->UseRealTime();

// Read bandwidth: all threads sum disjoint slices of a kColdBytes buffer,
// each its slice as 1 or 8 sequential streams side by side (the GEMV
// kernels stream 4-8 weight rows at once).
void BM_ReadBandwidth(benchmark::State& state) {
  const int streams = static_cast<int>(state.range(0));
  const int64_t words = kColdBytes / 8;
  std::vector<uint64_t> buf(static_cast<size_t>(words));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < words; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  for (auto _ : state) benchmark::DoNotOptimize(bench::SweepRead(buf.data(), words, streams));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(kColdBytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReadBandwidth)->ArgName("streams")->Arg(1)->Arg(8)->UseRealTime()->MinTime(1.0);

// A decode step's linears as the engine runs them on one token: the dense
// synthetic model's shapes (tandem bench --synthetic dense: hidden 2048,
// ffn 5632, 16 query / 4 key-value heads of 128), q, k, v, o, gate, up and
// down of every layer in turn, all layers' weights back to back in one
// buffer on 2 MiB pages as the engine maps a checkpoint. 16 layers (1.4 GB
// in bf16) outgrow any L3, so each pass reads from DRAM; W_GB/s compares
// with BM_ReadBandwidth and with `tandem bench`'s decode B=1 (which adds
// attention, norms and the LM head; f32 weights 2.9 GB). Args: the dtype's
// index in kSeqTypes;
// huge: 1 for 2 MiB pages, 0 for 4 KiB pages (a model file the engine
// could not map on huge pages); m: rows of x (decode batches of up to 8
// rows are still bound by the weights' bytes).
constexpr DType kSeqTypes[] = {DType::kBF16, DType::kQ8_0, DType::kF32, DType::kQ4_0};
void BM_DecodeLayerSequence(benchmark::State& state) {
  const DType t = kSeqTypes[state.range(0)];
  constexpr int kLayers = 16;
  constexpr int64_t kHidden = 2048, kFfn = 5632, kKv = 512;
  // q, k, v, o, gate, up, down: {rows, columns}.
  const int64_t shapes[][2] = {{kHidden, kHidden}, {kKv, kHidden},  {kKv, kHidden},
                               {kHidden, kHidden}, {kFfn, kHidden}, {kFfn, kHidden},
                               {kHidden, kFfn}};
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (const auto& s : shapes) {
      offsets.push_back(total);
      // Each matrix starts on a cache line, as tensors in a checkpoint do.
      total += (DTypeBytes(t, s[0] * s[1]).value() + 63) / 64 * 64;
    }
  }
  constexpr size_t kPage = size_t{2} << 20;
  const size_t alloc = (static_cast<size_t>(total) + kPage - 1) / kPage * kPage;
  auto* base = static_cast<uint8_t*>(std::aligned_alloc(kPage, alloc));
  if (base == nullptr) {
    state.SkipWithError("cannot allocate the weights");
    return;
  }
  madvise(base, alloc, state.range(1) != 0 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  // One random matrix of each shape, copied to every layer.
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const int64_t n = shapes[s][0], k = shapes[s][1];
    const std::vector<float> wf = NormalInput(n * k);
    QuantizeFromF32(t, wf.data(), n * k, base + offsets[s]);
    for (int l = 1; l < kLayers; ++l) {
      std::memcpy(base + offsets[l * std::size(shapes) + s], base + offsets[s],
                  static_cast<size_t>(DTypeBytes(t, n * k).value()));
    }
  }
  std::vector<LinearWeight> w;
  for (size_t i = 0; i < offsets.size(); ++i) {
    const auto& s = shapes[i % std::size(shapes)];
    TensorView v;
    v.name = "layer";
    v.dtype = t;
    v.shape = {s[0], s[1]};
    v.data = base + offsets[i];
    v.nbytes = DTypeBytes(t, s[0] * s[1]).value();
    auto lw = LinearWeight::Create(v,
                                   t == DType::kBF16  ? ComputeType::kBF16
                                   : t == DType::kF32 ? ComputeType::kF32
                                                      : ComputeType::kQuantized,
                                   WeightLayout::kCpuPacked);
    if (!lw.ok()) {
      state.SkipWithError("LinearWeight::Create failed");
      std::free(base);
      return;
    }
    w.push_back(*lw);
  }
  const int64_t m = state.range(2);
  const std::vector<float> x = NormalInput(m * kFfn);
  std::vector<float> y(static_cast<size_t>(m * kFfn));
  int64_t bytes = 0;
  for (const auto& lw : w) bytes += lw.nbytes();
  // Each pass is followed by a read sweep of the same bytes (8 streams a
  // thread, bench_sweep.h), and the fraction of the sweep is the figure to
  // compare kernels by.
  const auto* words = reinterpret_cast<const uint64_t*>(base);
  const int64_t nwords = total / 8;
  double kernel_s = 0, sweep_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& lw : w) Linear(x.data(), m, lw, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(bench::SweepRead(words, nwords, 8));
    const auto t2 = std::chrono::steady_clock::now();
    kernel_s += std::chrono::duration<double>(t1 - t0).count();
    sweep_s += std::chrono::duration<double>(t2 - t1).count();
  }
  const double passes = static_cast<double>(state.iterations());
  state.counters["W_GB/s"] = static_cast<double>(bytes) * passes / kernel_s * 1e-9;
  state.counters["sweep_GB/s"] = static_cast<double>(total) * passes / sweep_s * 1e-9;
  state.counters["of_sweep"] =
      (static_cast<double>(bytes) / kernel_s) / (static_cast<double>(total) / sweep_s);
  state.SetLabel(std::string(DTypeName(t)));
  w.clear();
  std::free(base);
}
BENCHMARK(BM_DecodeLayerSequence)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 0}, {1, 2, 4, 8}})
    ->ArgNames({"dtype", "huge", "m"})
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace tandem::ops

BENCHMARK_MAIN();
