// `--config FILE`: flags from a YAML file whose keys are the long flag names,
// as vLLM's `vllm serve --config config.yaml` reads them:
//
//   model: /models/Mixtral-8x7B-Instruct-v0.1
//   port: 8000
//   cpu-experts: 4-per-layer      # or cpu_experts: the two spellings are one key
//   neo-sub-batches: true
//
// Precedence: the command line, then TANDEM_ARG_* variables
// (flag_environment.h), then the file. The file is read before the command
// line is parsed: each key must name a flag of the subcommand, each value be
// a scalar (a string, a number or true/false), and anything else is an error
// naming the file and line.
#ifndef TANDEM_CLI_FLAG_CONFIG_FILE_H_
#define TANDEM_CLI_FLAG_CONFIG_FILE_H_

#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::cli {

// The (key, value) pairs of a flat YAML mapping; keys with '_' as '-'.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseFlagConfig(
    const std::string& text, const std::string& file);

// Adds `--config FILE` to every subcommand of `app` (so that --help lists it).
void AddConfigFlag(CLI::App& app);

// What ApplyConfigFile set: the file and the variables it set (those the
// environment did not set already), for error messages (flag_sources.h).
struct AppliedConfig {
  std::string file;
  std::vector<std::string> variables;
};

// Takes `--config FILE` (or --config=FILE) out of argv, after the subcommand,
// and sets the TANDEM_ARG_ variable of each key not already set, so that the
// environment and the command line win. `app` names the subcommands and their
// flags; an unknown subcommand is left for the parser to report.
absl::Status ApplyConfigFile(const CLI::App& app, std::vector<std::string>* args,
                             AppliedConfig* applied = nullptr);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_FLAG_CONFIG_FILE_H_
