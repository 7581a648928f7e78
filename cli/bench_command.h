// `tandem bench`: the benchmark harness of the CPU path. Measures the
// machine (read bandwidth, GEMM peaks through the engine's kernels), then the
// engine on a model (--model, or --synthetic dense|moe written to a
// temporary directory): prompt processing, generation, batched decode and
// CPU decode attention alone, each as the median of --repeats runs against
// its roofline. A table, or --json for scripts. On a GPU (--device cuda)
// it measures the device too and prints the planner's prediction of each
// engine figure beside the measured one (--hardware PROFILE: on that
// profile instead).
#ifndef TANDEM_CLI_BENCH_COMMAND_H_
#define TANDEM_CLI_BENCH_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct BenchCommandOptions {
  std::string model;
  std::string synthetic;  // "dense" or "moe"
  std::string dtype;      // synthetic: f32|bf16|q8_0|q4_0 (bf16); --model: auto|bf16|f32|quantized
  // Synthetic shapes; 0 = the kind's default.
  int64_t hidden = 0, layers = 0, intermediate = 0, heads = 0, kv_heads = 0, vocab = 0;
  int64_t experts = 0, top_k = 0;
  uint32_t seed = 1;
  std::string device = "host";     // host, cuda, cuda:N
  double gpu_memory_budget_gb = 0;  // weights kept resident; 0 = all
  std::string hardware;  // a profile to predict the figures on (default: the device measured)
  int repeats = 5;
  int warmup = 1;
  int threads = 0;  // 0 = OpenMP's default (all cores)
  bool json = false;
  std::string json_file;  // also write the JSON report here
  std::vector<int64_t> pp = {128, 512};
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32};
  std::vector<int64_t> attn_contexts = {512, 1024, 4096};
  int64_t context = 128;
  int64_t tg_tokens = 32;
  int64_t decode_steps = 8;
  int64_t bandwidth_mib = 1024;
  int64_t attn_mib = 1024;
  int64_t gemm_size = 2048;
};

CLI::App* AddBenchCommand(CLI::App& app, BenchCommandOptions& opts);
// Returns the process exit code; errors are printed to stderr.
int RunBench(const BenchCommandOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BENCH_COMMAND_H_
