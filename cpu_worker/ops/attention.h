// Grouped-query attention over a paged KV cache (f32).
#ifndef TANDEM_CPU_WORKER_OPS_ATTENTION_H_
#define TANDEM_CPU_WORKER_OPS_ATTENTION_H_

#include <cstdint>

namespace tandem::ops {

// One layer's KV storage: blocks of `block_size` token slots.
// k and v are [num_blocks, block_size, kv_heads, head_dim].
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
// AVX-512 kernel runs where MaxKernelIsa() allows; `allow_avx512 = false`
// forces the portable one (for tests). Scratch is thread-local, grown once.
void AttendDecode(const DecodeQuery* queries, int64_t count, int64_t heads, const PagedKvLayer& kv,
                  float scale, bool allow_avx512 = true);

// Plain reference on contiguous k/v [total_len, kv_heads, head_dim].
void ReferenceAttention(const float* q, int64_t n, int64_t heads, const float* k,
                        const float* v, int64_t kv_heads, int64_t head_dim, int64_t first_pos,
                        float scale, float* out);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_ATTENTION_H_
