// Megatron-style tensor parallelism: which slice of each weight a rank holds.
//
// Attention is split by heads: Q, K, V are column-parallel (a rank computes
// its heads' rows of each projection), the output projection is
// row-parallel (a rank multiplies its heads' part of the attention output by
// the matching columns of W_o), and the ranks' partial outputs are summed by
// an all-reduce. MLPs and every expert are split the same way along their
// intermediate dimension: gate and up column-parallel, down row-parallel,
// one all-reduce after down (for a MoE layer, one after all experts and the
// shared expert). Norms, the router, the embedding and the LM head are
// replicated, so every rank routes identically and ends with the same
// logits.
//
// KV heads: with at least as many KV heads as ranks each rank takes
// kv_heads / size of them; with fewer (size a multiple of kv_heads), each
// KV head is replicated on size / kv_heads consecutive ranks — the ranks
// whose query heads use it — as vLLM does.
#ifndef TANDEM_GPU_WORKER_ENGINE_TENSOR_PARALLEL_H_
#define TANDEM_GPU_WORKER_ENGINE_TENSOR_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/tensor.h"

namespace tandem {

struct TensorParallel {
  int rank = 0;
  int size = 1;
};

// The heads of one rank.
struct AttentionShard {
  int64_t heads = 0;          // query heads of the rank
  int64_t head_begin = 0;     // its first query head
  int64_t kv_heads = 0;       // KV heads of the rank
  int64_t kv_head_begin = 0;  // its first KV head
};

// InvalidArgument, saying why, unless the model's attention splits over
// tp.size ranks (query heads divisible by it; KV heads divisible by it or
// dividing it; no whole-projection q/k norm over replicated KV heads, whose
// statistics would be counted several times). Other dimensions are checked
// as their weights are sliced.
absl::Status CheckTensorParallel(const ModelConfig& c, const TensorParallel& tp);
AttentionShard ShardAttention(const ModelConfig& c, const TensorParallel& tp);

// Bytes that keep sliced weights alive (views into them are handed out).
using ShardStorage = std::vector<std::shared_ptr<std::vector<uint8_t>>>;

// Rows [begin, begin + count) of a 2-D view [N, K]: a view into the same
// memory (rows are contiguous in every dtype, GGUF blocks included).
absl::StatusOr<TensorView> SliceRows(const TensorView& w, int64_t begin, int64_t count);
// Columns [begin, begin + count) of a 2-D view [N, K], copied into a new
// buffer appended to `storage`. GGUF block dtypes need begin and count on
// block boundaries (32 elements).
absl::StatusOr<TensorView> SliceCols(const TensorView& w, int64_t begin, int64_t count,
                                     ShardStorage& storage);
// Elements [begin, begin + count) of a vector (any element dtype; not GGUF
// blocks), as a view.
absl::StatusOr<TensorView> SliceVector(const TensorView& v, int64_t begin, int64_t count);

// This rank's part [begin, begin + total / size) of a dimension of `total`
// that splits into equal parts; InvalidArgument naming `what` otherwise.
absl::StatusOr<int64_t> ShardBegin(int64_t total, const TensorParallel& tp,
                                   const std::string& what);

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_TENSOR_PARALLEL_H_
