// The prompts of `tandem bench serve`, as `vllm bench serve` samples them.
//
//   random    prompt i has an input length drawn uniformly from
//             [input_len (1 - r), input_len (1 + r)] and an output length
//             likewise (r = range_ratio); its tokens come from seeded random
//             words that the server's own /tokenize turns into ids, cut to
//             the length: /v1/completions gets the ids themselves (exactly
//             that many prompt tokens), chat the text /detokenize gives back.
//             With prefix_len, every prompt starts with the same prefix_len
//             tokens of one random text drawn first (vLLM's
//             --random-prefix-len), which its input length includes.
//   sharegpt  conversations from a ShareGPT JSON file ([{"conversations":
//             [{"from": "human", "value": ...}, {"from": "gpt", "value":
//             ...}, ...]}, ...]), shuffled by the seed: the first turn is the
//             prompt (as text), the second's token count the output length
//             (or sharegpt_output_len); pairs with fewer than 4 tokens on
//             either side, a prompt over 1024 tokens or more than 2048 in
//             all are skipped, as vLLM skips them.
#ifndef TANDEM_COORDINATOR_LOADGEN_DATASETS_H_
#define TANDEM_COORDINATOR_LOADGEN_DATASETS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/loadgen/serve_benchmark.h"

namespace tandem::loadgen {

absl::StatusOr<std::vector<DatasetPrompt>> MakeRandomDataset(const ServeBenchmarkOptions& options);
absl::StatusOr<std::vector<DatasetPrompt>> MakeShareGptDataset(
    const ServeBenchmarkOptions& options);
// The dataset options.dataset_name names.
absl::StatusOr<std::vector<DatasetPrompt>> MakeDataset(const ServeBenchmarkOptions& options);

}  // namespace tandem::loadgen

#endif  // TANDEM_COORDINATOR_LOADGEN_DATASETS_H_
