// Host launchers of the CUDA KV-cache write and the causal prefill
// attention over the paged KV cache, for ragged batches of prefill chunks.
// Plain header (no CUDA types); device pointers; each returns the launch's
// cudaError_t as an int.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_PREFILL_ATTENTION_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_PREFILL_ATTENTION_H_

#include <cstdint>

#include "gpu_worker/cuda/kernels/act_dtype.h"

namespace tandem::cuda {

// The largest head_dim of the prefill kernel.
inline constexpr int64_t kMaxPrefillHeadDim = 256;

// Writes k/v rows [tokens, kv_heads, head_dim] (f32) into the cache k/v
// [num_blocks, block_size, kv_heads, head_dim] (`kv_type`) at slots[t] =
// block * block_size + offset (vLLM's slot mapping); a negative slot skips
// the token.
int LaunchWriteKv(const float* k, const float* v, int64_t tokens, int64_t kv_heads,
                  int64_t head_dim, const int64_t* slots, void* k_cache, void* v_cache,
                  ActType kv_type, void* stream);

// Causal attention of a ragged batch of chunks: chunk c's queries are rows
// q_start[c] .. q_start[c] + q_len[c] - 1 of q [rows, heads, head_dim] (f32)
// at positions start_pos[c] ..., attending keys 0 .. their own position of
// the chunk's sequence (already written), read through row c of
// block_tables [chunks, max_blocks]. Query head h reads KV head
// h / (heads / kv_heads). out like q. Key/value tiles are staged in shared
// memory and shared by the block's query rows; each row keeps an online
// softmax (f32, max subtraction) in its warp.
int LaunchPrefillAttention(const float* q, const void* k_cache, const void* v_cache,
                           ActType kv_type, int64_t block_size, int64_t kv_heads,
                           int64_t head_dim, int64_t heads, const int32_t* block_tables,
                           int64_t max_blocks, const int32_t* q_start, const int32_t* q_len,
                           const int32_t* start_pos, int64_t chunks, int64_t max_q_len,
                           float scale, float* out, void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_PREFILL_ATTENTION_H_
