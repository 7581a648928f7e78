// `tandem bench serve`: the load generator of coordinator/loadgen against a
// running OpenAI-compatible server, with `vllm bench serve`'s flags and
// output (a table, or --json / --result-filename with vLLM's field names).
//
//   tandem bench serve --base-url http://127.0.0.1:8000 --num-prompts 200 \
//     --random-input-len 512 --random-output-len 128 --request-rate 4 \
//     --max-concurrency 16 --ignore-eos
#ifndef TANDEM_CLI_BENCH_SERVE_COMMAND_H_
#define TANDEM_CLI_BENCH_SERVE_COMMAND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct BenchServeOptions {
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string backend = "openai";  // openai (/v1/completions) | openai-chat
  std::string model;
  std::string dataset_name = "random";  // or sharegpt
  std::string dataset_path;
  int sharegpt_output_len = 0;
  int num_prompts = 100;
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int random_prefix_len = 0;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string metric_percentiles = "99";
  std::vector<std::string> goodput;  // "ttft:MS", "tpot:MS", "e2el:MS"
  std::string api_key;               // else $OPENAI_API_KEY
  int timeout_s = 600;
  bool json = false;
  bool save_result = false;
  std::string result_dir;
  std::string result_filename;
};

// Adds `serve` under `bench`.
CLI::App* AddBenchServeCommand(CLI::App& bench, BenchServeOptions& opts);
int RunBenchServe(const BenchServeOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BENCH_SERVE_COMMAND_H_
