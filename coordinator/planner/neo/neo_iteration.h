// Neo's per-iteration decision (neo.md §2): which CPU-KV decode requests run
// this iteration and in which of the two asymmetric sub-batches, and whether
// the asymmetric plan beats the GPU-only one.
//
//   batch-0: all prefills, all GPU-KV decodes, a few CPU-KV decodes
//   batch-1: most CPU-KV decodes
// Per layer, stage A runs batch-0's linear ops on the GPU while the CPU
// attends for batch-1; stage B runs batch-1's linear ops and batch-0's GPU
// attention while the CPU attends for batch-0's CPU requests:
//   T_layer = max(T_l0, T_ca1) + max(T_l1 + T_ga0, T_ca0)
// and the CPU is hidden when both inequalities hold:
//   slack1 = T_l0 − T_ca1 >= 0      slack0 = T_l1 + T_ga0 − T_ca0 >= 0
// A request's attention runs where its KV is (a request's KV is never
// split), so "which requests use CPU attention" is which CPU-KV requests are
// admitted; GPU-KV requests always run, in batch-0.
//
// Procedure (the paper's steps 1, 3, 4, 6; the authors' code for details):
//  - every prefill and GPU decode goes to batch-0;
//  - CPU decodes, first come first served, go to the batch with more slack
//    (ties: batch-1), the other batch if that breaks an inequality (our
//    extension: the code tries one), else they wait for a later iteration;
//    once a request of context ℓ fails, later ones of context >= ℓ wait too
//    (the code's shortcut: attention cost grows with context);
//  - the GPU-only plan is batch-0 without its CPU decodes; the plan with more
//    requests per second runs (requests, not tokens, as the code counts).
// Left out: swaps between the KV pools (the scheduler's block manager owns
// them) and the trimming of prefills (step 5).
// Starvation guard (ours; the paper has none): when there is no GPU work at
// all, no CPU request can be hidden, and the iteration would stall; then
// every CPU decode runs in batch-1, unhidden.
//
// Pure: cost functions in, decision out; the scheduler calls it every
// iteration with profiled costs, the planner with modelled ones.
#ifndef TANDEM_COORDINATOR_PLANNER_NEO_NEO_ITERATION_H_
#define TANDEM_COORDINATOR_PLANNER_NEO_NEO_ITERATION_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::neo {

enum class KvLocation { kGpu, kCpu };

struct DecodeRequest {
  int64_t id = 0;
  int64_t context_len = 0;  // keys its attention reads (its own token included)
  KvLocation kv = KvLocation::kGpu;
};

struct PrefillRequest {
  int64_t id = 0;
  int64_t prompt_len = 0;
};

// Seconds per layer. A function is never asked about an empty sub-batch
// (empty work costs 0).
struct IterationCosts {
  std::function<double(int64_t tokens)>
      gpu_linear_s;  // pre + post projection of S tokens
  std::function<double(int64_t requests, int64_t context_tokens)>
      gpu_decode_attention_s;
  std::function<double(int64_t prompt_len)>
      gpu_prefill_attention_s;  // one prompt
  // Includes the fixed cost of a CPU attention call (Neo's code adds 0.7 ms).
  std::function<double(int64_t requests, int64_t context_tokens)>
      cpu_decode_attention_s;
};

struct SubBatch {
  std::vector<int64_t> prefill_ids;
  std::vector<int64_t> gpu_decode_ids;
  std::vector<int64_t> cpu_decode_ids;
  int64_t tokens = 0;  // prefill tokens + one per decode: the linear ops' rows
  int64_t prefill_tokens = 0;
  int64_t gpu_context = 0;     // context tokens of its GPU decodes
  int64_t cpu_context = 0;     // context tokens of its CPU decodes
  double linear_s = 0;         // T_l
  double gpu_attention_s = 0;  // T_ga: prefill attention + GPU decode attention
  double cpu_attention_s = 0;  // T_ca
  int64_t requests() const {
    return static_cast<int64_t>(prefill_ids.size() + gpu_decode_ids.size() +
                                cpu_decode_ids.size());
  }
};

struct IterationPlan {
  bool pipelined = false;  // run batch0 + batch1 (else run gpu_only)
  SubBatch batch0;         // the asymmetric candidate
  SubBatch batch1;
  SubBatch gpu_only;    // batch-0 without CPU decodes
  double slack0_s = 0;  // of the asymmetric candidate
  double slack1_s = 0;
  double pipelined_iteration_s = 0;  // layers · T_layer
  double gpu_only_iteration_s = 0;   // layers · (T_l + T_ga)
  double pipelined_rate = 0;         // requests per second
  double gpu_only_rate = 0;
  bool starvation_guard = false;  // no GPU work: CPU decodes ran unhidden
  std::vector<int64_t> cpu_attention_ids;  // CPU decodes that run (chosen plan)
  std::vector<int64_t> deferred_ids;       // CPU decodes left for later

  double iteration_s() const {
    return pipelined ? pipelined_iteration_s : gpu_only_iteration_s;
  }
  int64_t requests_run() const {
    return pipelined ? batch0.requests() + batch1.requests()
                     : gpu_only.requests();
  }
};

// InvalidArgument for a missing cost function, layers < 1, a context or
// prompt < 1, a duplicate id, or a cost that is negative or not finite.
absl::StatusOr<IterationPlan> PlanIteration(
    absl::Span<const PrefillRequest> prefills,
    absl::Span<const DecodeRequest> decodes, const IterationCosts& costs,
    int num_layers);

}  // namespace tandem::neo

#endif  // TANDEM_COORDINATOR_PLANNER_NEO_NEO_ITERATION_H_
