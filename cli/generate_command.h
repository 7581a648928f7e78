// `tandem generate`: runs the engine in this process on the host device and
// prints the continuation of one prompt.
#ifndef TANDEM_CLI_GENERATE_COMMAND_H_
#define TANDEM_CLI_GENERATE_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string prompt_ids;  // "1,2,3"
  int64_t max_tokens = 128;
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool json = false;
  bool ignore_eos = false;
  bool no_special = false;
  std::string dtype = "auto";
  std::string device = "host";  // host, cuda, cuda:N
  int64_t max_context = 0;
  std::string cpu_experts = "none";  // routed experts computed by a cpu_worker child
};

// Registers the subcommand; `run` is called with the parsed options.
CLI::App* AddGenerateCommand(CLI::App& app, GenerateOptions& opts);
// Returns the process exit code; errors are printed to stderr.
int RunGenerate(const GenerateOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_GENERATE_COMMAND_H_
