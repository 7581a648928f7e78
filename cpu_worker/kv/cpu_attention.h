// The compute side of Neo-style CPU attention: per layer, takes the q/k/v
// rows (after projection, norms and RoPE) of the sequences whose KV lives
// here, appends their keys and values to the CPU KV cache at their
// positions, and returns causal grouped-query attention over everything the
// sequence holds, before the output projection. The same object serves the
// cpu_worker's attention rings and the engine's in-process offload, so both
// run exactly the same kernels (cpu_worker/ops/attention).
#ifndef TANDEM_CPU_WORKER_KV_CPU_ATTENTION_H_
#define TANDEM_CPU_WORKER_KV_CPU_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cpu_worker/kv/cpu_kv_cache.h"

namespace tandem {

struct CpuAttentionShape {
  CpuKvShape kv;        // layers, kv heads, head_dim, block size, capacity
  int64_t heads = 0;    // query heads: a multiple of kv.kv_heads
  float scale = 0.0f;   // softmax scale, the engine's (1/sqrt(head_dim))
};

// One sequence's rows of one layer: positions start_pos .. start_pos+tokens-1.
struct CpuAttentionTask {
  int64_t seq_id = 0;
  int64_t start_pos = 0;
  int64_t tokens = 0;
  const float* q = nullptr;  // [tokens, heads * head_dim]
  const float* k = nullptr;  // [tokens, kv_heads * head_dim]
  const float* v = nullptr;  // [tokens, kv_heads * head_dim]
  float* out = nullptr;      // [tokens, heads * head_dim]
};

class CpuAttention {
 public:
  static absl::StatusOr<std::unique_ptr<CpuAttention>> Create(const CpuAttentionShape& shape);

  // Runs the tasks of one layer in order. Everything is checked before any
  // state changes: the layer exists, each task starts at or before the
  // positions its sequence already holds for this layer (InvalidArgument
  // otherwise) and the cache can hold all of them (ResourceExhausted,
  // nothing reserved). A sequence may appear more than once; later tasks see
  // the keys of earlier ones.
  absl::Status Run(int64_t layer, absl::Span<const CpuAttentionTask> tasks);

  // Forgets a sequence and returns its blocks; unknown ids are ignored.
  void Free(int64_t seq_id) { cache_->Free(seq_id); }

  const CpuAttentionShape& shape() const { return shape_; }
  const CpuKvCache& cache() const { return *cache_; }

 private:
  CpuAttention() = default;
  CpuAttentionShape shape_;
  std::unique_ptr<CpuKvCache> cache_;
};

}  // namespace tandem

#endif  // TANDEM_CPU_WORKER_KV_CPU_ATTENTION_H_
