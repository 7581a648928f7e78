// MoE-Lightning's variable-length batching (Algorithm 2, Appendix A.2):
// requests of different prompt lengths are packed into micro-batches
// without padding, each micro-batch within its KV budget, so that the
// policy (sized with the average prompt length) holds for the real mix.
#ifndef TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_VARIABLE_LENGTH_BATCHING_H_
#define TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_VARIABLE_LENGTH_BATCHING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::planner::ml {

struct VarLenBatchOptions {
  int64_t num_micro_batches = 1;  // n_ub: partitions opened at once (N / μ)
  int64_t micro_batch_size = 1;   // μ ("ubs"): requests that close a partition
  int64_t gen_len = 0;            // tokens every request will generate
  // KV tokens one micro-batch may hold (its share of the KV cache):
  // prompt tokens of its members plus gen_len for each.
  int64_t cache_tokens_per_micro_batch = 0;
};

struct MicroBatch {
  std::vector<int64_t> requests;  // indices into the prompt-length list
  int64_t prompt_tokens = 0;
  // prompt_tokens + |requests| · gen_len: what its KV needs at the end.
  int64_t kv_tokens = 0;
};

struct VarLenBatch {
  // Closed (full) partitions first, in the order they filled, then the
  // partly filled ones in partition order.
  std::vector<MicroBatch> micro_batches;
  // Requests left for the next batch, longest first.
  std::vector<int64_t> deferred;
};

// Algorithm 2. Requests are taken longest prompt first; each goes to the
// open partition with the fewest prompt tokens (ties: the lowest
// partition). A request is deferred to the next batch when that partition
// cannot hold it:
//   partition_tokens + input_len + (1 + |partition|) · gen_len > cache_size.
// A partition that reaches μ requests closes and becomes a micro-batch;
// once none is open, every remaining request is deferred.
//
// Choices where the listing is silent:
//  - Only the fewest-token partition is tried, as in the listing, although
//    a fuller partition with fewer members could sometimes fit the request:
//    trying it would break the balance of prompt tokens the rule aims for.
//  - Partitions still open at the end become micro-batches too (smaller
//    than μ): dropping them would defer requests that fit, and a short
//    micro-batch only costs one more GPU pass over the layer's weights.
//    Empty partitions are dropped.
// InvalidArgument for non-positive prompt lengths or options.
absl::StatusOr<VarLenBatch> PackVariableLength(
    absl::Span<const int64_t> prompt_lens, const VarLenBatchOptions& options);

}  // namespace tandem::planner::ml

#endif  // TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_VARIABLE_LENGTH_BATCHING_H_
