// Single-sequence generation on the engine: chunked prefill, then decode one
// token per step with a per-request sampler until max_tokens, an EOS token,
// the context limit, or the caller says stop.
#ifndef TANDEM_GPU_WORKER_ENGINE_GENERATOR_H_
#define TANDEM_GPU_WORKER_ENGINE_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cpu_worker/ops/sampling.h"
#include "gpu_worker/engine/engine.h"

namespace tandem {

struct GenerationParams {
  int64_t max_tokens = 128;
  ops::SamplingParams sampling;
  std::vector<int32_t> eos_ids;  // any of these ends generation (it is not emitted)
  bool ignore_eos = false;
  int64_t prefill_chunk = 512;  // prompt tokens per step
  bool cpu_attention = false;   // attention and KV on the engine's attention offload
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0;  // log-probability under the model's (untempered) distribution
};

struct GenerationResult {
  std::vector<GeneratedToken> tokens;
  std::string finish_reason;  // "stop" (EOS or caller), "length" (max_tokens or context)
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// `on_token` sees each token as it is produced; returning false stops.
// The sequence's KV is freed before returning.
absl::StatusOr<GenerationResult> Generate(
    Engine& engine, int64_t seq_id, const std::vector<int32_t>& prompt,
    const GenerationParams& params,
    const std::function<bool(const GeneratedToken&)>& on_token = nullptr);

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_GENERATOR_H_
