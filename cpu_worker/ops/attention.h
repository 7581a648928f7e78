// Grouped-query attention over a paged KV cache (f32).
#ifndef TANDEM_CPU_WORKER_OPS_ATTENTION_H_
#define TANDEM_CPU_WORKER_OPS_ATTENTION_H_

#include <cstdint>

#include "cpu_worker/ops/cpu_features.h"

namespace tandem::ops {

// One layer's KV storage: blocks of `block_size` token slots. Here, in host
// memory, a block holds each kv head's part together (the attention kernel
// walks one kv head at a time, so it reads contiguous memory: on the
// development VM 6-9% faster than token-major blocks, 1 GiB of KV, 2
// threads): v is [num_blocks, kv_heads, block_size, head_dim] and k is
// transposed within each part, [num_blocks, kv_heads, head_dim,
// block_size], so the kernel forms 16 keys' scores as the lanes of one
// vector instead of reducing each key's dot product across lanes (see
// decode_attention.cc). The layout belongs to the memory's owner: the CUDA
// device's kernels keep their caches token-major ([num_blocks, block_size,
// kv_heads, head_dim], gpu_worker/cuda/kernels/decode_attention.h); the two
// never exchange blocks.
struct PagedKvLayer {
  float* k = nullptr;
  float* v = nullptr;
  int64_t block_size = 16;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// Writes k/v rows [n, kv_heads, head_dim] of one sequence for positions
// first_pos .. first_pos + n - 1 through its block table.
void WriteKv(const PagedKvLayer& kv, const int32_t* block_table, int64_t first_pos, int64_t n,
             const float* k, const float* v);

// Causal attention of one sequence's n queries q [n, heads, head_dim] at
// positions first_pos .. first_pos+n-1 against keys 0 .. first_pos+n-1
// (already written). Query head h reads kv head h / (heads / kv_heads).
// out [n, heads, head_dim]. Softmax in f32 with max subtraction. Every
// query runs as a decode query of its own length through AttendDecode, so
// a token's result does not depend on the other tokens of its step.
void AttendSequence(const float* q, int64_t n, int64_t heads, const PagedKvLayer& kv,
                    const int32_t* block_table, int64_t first_pos, float scale, float* out);

// One decoding sequence: its single query token attends keys 0 .. len-1
// (already written, its own included).
struct DecodeQuery {
  const float* q = nullptr;  // [heads, head_dim]
  const int32_t* block_table = nullptr;
  int64_t len = 0;       // keys, at least 1
  float* out = nullptr;  // [heads, head_dim]
};

// Decode attention of `count` sequences with one query each, at the speed of
// reading their keys and values once (flash-decoding): each K/V row is read
// once for all the query heads of its kv head's group, with an online
// softmax, and long contexts are split into chunks that OpenMP threads share
// and a merge step combines. AttendSequence runs every query this way. The
// AVX-512 kernel runs where MaxKernelIsa() allows, else the AVX2 kernel
// where AVX2 is allowed, else the portable one; `max_isa` caps the level
// further (tests: kScalar forces the portable kernel, kAvx2 the AVX2 one).
// Scratch is thread-local, grown once.
void AttendDecode(const DecodeQuery* queries, int64_t count, int64_t heads, const PagedKvLayer& kv,
                  float scale, KernelIsa max_isa = KernelIsa::kAvx512Vnni);

// Offset in floats of element 0 of position `pos`'s key for kv head `kvh`
// in a layer's k, through the sequence's block table; element i lies
// i * block_size floats on.
inline int64_t KeyOffset(const PagedKvLayer& kv, const int32_t* block_table, int64_t pos,
                         int64_t kvh) {
  const int64_t block = block_table[pos / kv.block_size];
  return (block * kv.kv_heads + kvh) * kv.block_size * kv.head_dim + pos % kv.block_size;
}

// Offset in floats of position `pos`'s value row (head_dim contiguous
// floats) for kv head `kvh` in a layer's v.
inline int64_t ValueRowOffset(const PagedKvLayer& kv, const int32_t* block_table, int64_t pos,
                              int64_t kvh) {
  const int64_t block = block_table[pos / kv.block_size];
  return ((block * kv.kv_heads + kvh) * kv.block_size + pos % kv.block_size) * kv.head_dim;
}

// Plain reference on contiguous k/v [total_len, kv_heads, head_dim].
void ReferenceAttention(const float* q, int64_t n, int64_t heads, const float* k,
                        const float* v, int64_t kv_heads, int64_t head_dim, int64_t first_pos,
                        float scale, float* out);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_ATTENTION_H_
