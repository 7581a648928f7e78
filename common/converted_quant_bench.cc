// Load-time cost of the GGUF conversions (converted_quant.h): one 4096 x 4096 weight
// of each type converted on 1 and 2 threads, as the first open of a model does (the
// on-disk cache saves it afterwards).
//   ninja -C build tandem_converted_quant_bench && build/common/tandem_converted_quant_bench
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/converted_quant.h"
#include "common/testing/quant_blocks.h"

namespace tandem {
namespace {

void BM_ConvertQuantBlocks(benchmark::State& state) {
  const auto t = static_cast<ConvertedQuant>(state.range(0));
  const int64_t n = 4096 * 4096;
  std::mt19937 rng(1);
  const std::vector<uint8_t> src =
      testing::RandomQuantWeights(t, n / ConvertedQuantBlockElems(t), 0.1f, rng);
  std::vector<uint8_t> dst(
      static_cast<size_t>(DTypeBytes(ConvertedQuantComputeType(t), n).value()));
  for (auto _ : state) {
    if (!ConvertQuantBlocks(t, src.data(), n, dst.data(), static_cast<int>(state.range(1))).ok()) {
      state.SkipWithError("refused");
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetLabel(std::string(ConvertedQuantName(t)));
  // Bytes read from the file's blocks.
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(src.size()));
  state.counters["Melem/s"] = benchmark::Counter(static_cast<double>(n) * state.iterations() / 1e6,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ConvertQuantBlocks)
    ->ArgNames({"ggml_type", "threads"})
    ->ArgsProduct({{12, 14, 13, 11, 10, 23, 6, 7, 20}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
