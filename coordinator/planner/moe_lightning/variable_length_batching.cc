#include "coordinator/planner/moe_lightning/variable_length_batching.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tandem::planner::ml {

absl::StatusOr<VarLenBatch> PackVariableLength(
    absl::Span<const int64_t> prompt_lens, const VarLenBatchOptions& o) {
  if (o.num_micro_batches < 1 || o.micro_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable-length batching: num_micro_batches (", o.num_micro_batches,
        ") and micro_batch_size (", o.micro_batch_size, ") must be >= 1"));
  }
  if (o.gen_len < 0 || o.cache_tokens_per_micro_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable-length batching: gen_len (", o.gen_len,
                     ") must be >= 0 and the cache (",
                     o.cache_tokens_per_micro_batch, " tokens) >= 1"));
  }
  for (size_t i = 0; i < prompt_lens.size(); ++i) {
    if (prompt_lens[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable-length batching: request ", i,
                       " has prompt length ", prompt_lens[i]));
    }
  }

  // Longest first; equal lengths keep their arrival order (stable).
  std::vector<int64_t> order(prompt_lens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return prompt_lens[a] > prompt_lens[b];
  });

  std::vector<MicroBatch> open(static_cast<size_t>(o.num_micro_batches));
  std::vector<bool> is_open(open.size(), true);
  int64_t num_open = o.num_micro_batches;
  VarLenBatch out;

  for (int64_t r : order) {
    if (num_open == 0) {
      out.deferred.push_back(r);
      continue;
    }
    size_t best = open.size();
    for (size_t p = 0; p < open.size(); ++p) {
      if (!is_open[p]) continue;
      if (best == open.size() ||
          open[p].prompt_tokens < open[best].prompt_tokens)
        best = p;
    }
    MicroBatch& part = open[best];
    const int64_t members = static_cast<int64_t>(part.requests.size());
    const int64_t need =
        part.prompt_tokens + prompt_lens[r] + (1 + members) * o.gen_len;
    if (need > o.cache_tokens_per_micro_batch) {
      out.deferred.push_back(r);
      continue;
    }
    part.requests.push_back(r);
    part.prompt_tokens += prompt_lens[r];
    part.kv_tokens = need;
    if (static_cast<int64_t>(part.requests.size()) == o.micro_batch_size) {
      out.micro_batches.push_back(part);
      is_open[best] = false;
      --num_open;
    }
  }
  for (size_t p = 0; p < open.size(); ++p) {
    if (is_open[p] && !open[p].requests.empty())
      out.micro_batches.push_back(open[p]);
  }
  return out;
}

}  // namespace tandem::planner::ml
