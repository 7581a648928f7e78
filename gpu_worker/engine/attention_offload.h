// The engine's hook for attention computed outside its own device (Neo):
// sequences whose KV lives in a CPU cache owned by the offload (the
// cpu_worker through shared memory, or an in-process stand-in). Per layer the
// engine computes q/k/v (projections, biases, q/k norms, RoPE) for every
// token as usual, submits the rows of the offloaded sequences, computes the
// attention of its own sequences over its paged cache meanwhile, then
// collects the offloaded sequences' attention output (before o_proj), so
// both sides work at once. The offload appends their k/v to its own cache;
// the engine keeps no KV for them.
#ifndef TANDEM_GPU_WORKER_ENGINE_ATTENTION_OFFLOAD_H_
#define TANDEM_GPU_WORKER_ENGINE_ATTENTION_OFFLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/model_config.h"
#include "cpu_worker/kv/cpu_attention.h"

namespace tandem {

// One sequence's rows of one layer: positions start_pos .. start_pos+tokens-1.
struct AttentionJob {
  int64_t seq_id = 0;
  int64_t start_pos = 0;
  int64_t tokens = 0;
  const float* q = nullptr;  // [tokens, heads * head_dim]
  const float* k = nullptr;  // [tokens, kv_heads * head_dim]
  const float* v = nullptr;  // [tokens, kv_heads * head_dim]
  float* out = nullptr;      // [tokens, heads * head_dim], filled by Collect
};

class AttentionOffload {
 public:
  virtual ~AttentionOffload() = default;
  // Starts the jobs of one layer. Their rows must stay valid until Collect.
  virtual absl::Status Submit(int64_t layer, const std::vector<AttentionJob>& jobs) = 0;
  // Waits for the jobs of the last Submit and writes their outputs.
  // kUnavailable when the worker behind the offload is gone; the offload
  // side's own errors (ResourceExhausted when its cache is full,
  // InvalidArgument for positions it does not hold) keep their codes.
  virtual absl::Status Collect(int64_t layer, const std::vector<AttentionJob>& jobs) = 0;
  // Forgets a sequence's KV, at once or before the jobs of the next Submit
  // (so an id may be reused right away). Never fails: an offload that is
  // gone has lost the KV anyway.
  virtual void Free(int64_t seq_id) = 0;
};

// The CPU attention shape that matches `config` as the engine computes it:
// its heads, kv heads and head_dim, every layer, the engine's softmax scale
// 1/sqrt(head_dim), and `capacity_tokens` of KV in blocks of `block_size`.
CpuAttentionShape CpuAttentionShapeFor(const ModelConfig& config, int64_t block_size,
                                       int64_t capacity_tokens);

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_ATTENTION_OFFLOAD_H_
