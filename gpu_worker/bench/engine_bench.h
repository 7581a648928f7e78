// The engine's figures on one model: prompt processing (pp: one fresh
// sequence's N prompt tokens in one step), single-sequence generation (tg:
// the generator's decode loop, sampling included, at a short context) and
// batched decode (B sequences, one token each per step, at a fixed
// context: every step re-runs position `context`, so the context does not
// creep up over the repeats). Each figure is the median (min, max) of
// `repeats` timed runs after `warmup` untimed ones.
#ifndef TANDEM_GPU_WORKER_BENCH_ENGINE_BENCH_H_
#define TANDEM_GPU_WORKER_BENCH_ENGINE_BENCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu_worker/bench/expert_usage.h"
#include "gpu_worker/bench/figure.h"
#include "gpu_worker/bench/model_costs.h"
#include "gpu_worker/engine/engine.h"

namespace tandem::bench {

struct EngineBenchOptions {
  std::vector<int64_t> pp_tokens = {128, 512};
  int64_t context = 128;   // tokens in each sequence before tg / batched decode
  int64_t tg_tokens = 32;  // generated per tg run (>= 2)
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32};
  int64_t decode_steps = 8;  // steps per timed batched-decode run
  int warmup = 1;
  int repeats = 5;
  BandwidthSampler sample_read_gbs;  // sampled after each timed run (figure.h); may be empty
};

// Checks sizes (positive, tg_tokens >= 2, ...): InvalidArgument otherwise.
absl::Status ValidateEngineBenchOptions(const EngineBenchOptions& o);

// Engine options whose KV pool holds the largest set of sequences the
// bench keeps at once, and whose context holds the longest.
EngineOptions EngineOptionsFor(const EngineBenchOptions& o, ops::ComputeType compute);

struct EngineFigures {
  std::vector<Figure> pp;
  Figure tg;
  std::vector<Figure> decode;
};

// `usage` must be the engine's expert offload (null for dense models).
// Compute peaks: the GEMM the engine's weights take (f32, bf16, or for
// quantized weights int8 in decode batches the int8 kernels take and the
// dequantizing bf16/f32 GEMM above that and in prefill).
absl::StatusOr<EngineFigures> RunEngineBench(Engine& engine, ExpertUsage* usage,
                                             const ModelCosts& costs, const Peaks& peaks,
                                             const EngineBenchOptions& o);

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_ENGINE_BENCH_H_
