// Host launcher of the CUDA decode attention over a paged KV cache. Plain
// header (no CUDA types); device pointers; each returns the launch's
// cudaError_t as an int.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_DECODE_ATTENTION_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_DECODE_ATTENTION_H_

#include <cstdint>

#include "gpu_worker/cuda/kernels/act_dtype.h"

namespace tandem::cuda {

// The largest head_dim the kernel handles (8 values per lane of a warp).
inline constexpr int64_t kMaxDecodeHeadDim = 256;

// One decode query per sequence: q [seqs, heads, head_dim] f32 attends to
// the first context_lens[s] keys of sequence s (its current token's K/V
// already written), read through its row of block_tables [seqs,
// max_blocks] from the cache k/v [num_blocks, block_size, kv_heads,
// head_dim] (token-major; the host kernels lay blocks out by kv head, see
// ops::PagedKvLayer) in `kv_type`. Query head h reads
// KV head h / (heads / kv_heads). Softmax in f32 with max subtraction (an
// online softmax per warp, merged across the block's warps). out [seqs,
// heads, head_dim] f32. A sequence with context 0 gets zeros.
int LaunchPagedDecodeAttention(const float* q, const void* k_cache, const void* v_cache,
                               ActType kv_type, int64_t block_size, int64_t kv_heads,
                               int64_t head_dim, int64_t heads, const int32_t* block_tables,
                               int64_t max_blocks, const int32_t* context_lens, int64_t seqs,
                               float scale, float* out, void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_DECODE_ATTENTION_H_
