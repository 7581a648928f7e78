// `tandem bench serve`: a load generator with the semantics of `vllm bench
// serve` against any OpenAI-compatible server (Tandem's or another). It
// builds a seeded dataset of prompts (random or ShareGPT, as vLLM samples
// them: datasets.h), sends the requests at a Poisson (gamma) rate or all at
// once, at most `max_concurrency` in flight, streams every answer to time
// it, and summarises the run with vLLM's field names (request_record.h).
#ifndef TANDEM_COORDINATOR_LOADGEN_SERVE_BENCHMARK_H_
#define TANDEM_COORDINATOR_LOADGEN_SERVE_BENCHMARK_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/loadgen/request_record.h"
#include "coordinator/loadgen/streaming_request.h"
#include "nlohmann/json.hpp"

namespace tandem::loadgen {

struct ServeBenchmarkOptions {
  ServerAddress server;
  std::string model;  // "": the first the server lists at /v1/models
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  int num_prompts = 100;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;
  int prefix_len = 0;  // random: tokens of one opening every prompt starts with
  // "random", or "sharegpt" read from dataset_path (datasets.h).
  std::string dataset_name = "random";
  std::string dataset_path;
  int sharegpt_output_len = 0;  // > 0: every output this long, not the reply's
  double request_rate = INFINITY;
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: no limit but 1024 (one thread per request in flight)
  uint64_t seed = 0;
  bool ignore_eos = true;  // so that each answer has its output length
  SummaryOptions summary;
  // Progress lines (may be null).
  std::function<void(const std::string&)> progress;
};

// One prompt of the dataset.
struct DatasetPrompt {
  nlohmann::json prompt;  // token ids (completions) or text (chat)
  int64_t input_len = 0;
  int64_t output_len = 0;
};

// Runs the benchmark: the summary (Summarize's fields plus the run's
// settings: model, endpoint, num_prompts, request_rate, burstiness,
// max_concurrency, input and output lengths, and the first errors).
// Unavailable when the server cannot be reached; requests that fail are
// counted, not fatal.
absl::StatusOr<nlohmann::ordered_json> RunServeBenchmark(const ServeBenchmarkOptions& options);

}  // namespace tandem::loadgen

#endif  // TANDEM_COORDINATOR_LOADGEN_SERVE_BENCHMARK_H_
