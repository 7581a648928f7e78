// `tandem plan`: runs the policy search for a model on a hardware profile and
// a workload and prints the chosen policy, its predicted throughput and
// latency, the bottleneck resource, and every family's best policy beside it.
#ifndef TANDEM_CLI_PLAN_COMMAND_H_
#define TANDEM_CLI_PLAN_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct PlanCommandOptions {
  std::string model;     // HF directory, .gguf file, or a config.json
  std::string hardware = "host";  // a profile JSON file, or "host" (measured, cached)
  std::string workload = "offline";  // offline | online
  int64_t prompt_len = 0;
  int64_t max_prompt_len = 0;
  int64_t gen_len = 0;
  double slo_itl_ms = 0;
  double gpu_memory_budget_gb = 0;
  int64_t max_batch = 0;
  std::string weight_dtype = "auto";  // auto | bf16 | fp16 | f32 | int8 | int4
  std::string kv_dtype = "fp16";      // fp16 | bf16 | f32 | int8 | int4
  bool json = false;
  std::string trace;  // Chrome-trace JSON of the chosen policy's decode step
};

CLI::App* AddPlanCommand(CLI::App& app, PlanCommandOptions& opts);
int RunPlan(const PlanCommandOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_PLAN_COMMAND_H_
