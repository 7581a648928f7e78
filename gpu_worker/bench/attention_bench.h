// CPU decode attention alone (Neo's CPU attention, as the cpu_worker runs
// it): for each context length, a set of sequences each holding `context`
// positions in a CPU KV cache, and one decode token per sequence through
// every layer — the rows appended to the cache and attention over all the
// sequence's keys, with the kernels CpuAttention::Run calls (ops::WriteKv,
// ops::AttendSequence). The number of sequences is chosen so that their KV
// outgrows the caches (at least `min_bytes`), since a step that reads from
// L3 would measure the cache, not the memory the roofline is drawn with.
#ifndef TANDEM_GPU_WORKER_BENCH_ATTENTION_BENCH_H_
#define TANDEM_GPU_WORKER_BENCH_ATTENTION_BENCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "gpu_worker/bench/figure.h"

namespace tandem::bench {

struct AttentionBenchOptions {
  std::vector<int64_t> contexts = {512, 1024, 4096};
  int64_t min_bytes = int64_t{1} << 30;  // KV read per pass, at least
  int64_t max_sequences = 256;
  int warmup = 1;
  int repeats = 5;
  BandwidthSampler sample_read_gbs;  // sampled after each timed run (figure.h); may be empty
};

// Shapes (layers, heads, kv heads, head_dim) from `config`. Figure.rate is
// decode tokens per second (sequences / seconds of one pass over every
// layer); the roofline is the KV bytes of a pass over the bandwidth.
absl::StatusOr<std::vector<Figure>> RunAttentionBench(const ModelConfig& config, const Peaks& peaks,
                                                      const AttentionBenchOptions& o);

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_ATTENTION_BENCH_H_
