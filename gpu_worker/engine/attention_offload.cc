#include "gpu_worker/engine/attention_offload.h"

#include <cmath>

namespace tandem {

CpuAttentionShape CpuAttentionShapeFor(const ModelConfig& c, int64_t block_size,
                                       int64_t capacity_tokens) {
  CpuAttentionShape s;
  s.kv.num_layers = c.num_layers;
  s.kv.kv_heads = c.num_kv_heads;
  s.kv.head_dim = c.head_dim;
  s.kv.block_size = block_size;
  s.kv.capacity_tokens = capacity_tokens;
  s.heads = c.num_heads;
  // The same expression as Engine::Attention, so both sides round alike.
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return s;
}

}  // namespace tandem
