// `tandem serve --model PATH`: the coordinator in this process (worker
// registry, step driver, OpenAI-compatible HTTP API) with its workers as
// supervised child processes — a gpu_worker and, with --cpu-experts, a
// cpu_worker — restarted when they die. SIGTERM/SIGINT stop everything.
#ifndef TANDEM_CLI_SERVE_COMMAND_H_
#define TANDEM_CLI_SERVE_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct ServeOptions {
  std::string model;
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string cpu_experts = "none";
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 16;
  int64_t max_num_batched_tokens = 2048;
  int64_t kv_blocks = 0;
  std::string chat_template;  // a file
};

CLI::App* AddServeCommand(CLI::App& app, ServeOptions& opts);
int RunServe(const ServeOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_SERVE_COMMAND_H_
