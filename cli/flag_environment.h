// Flags from the environment: every flag of every subcommand also reads
// TANDEM_ARG_<NAME>, its long name upper-cased with '-' as '_' (--max-num-seqs
// is TANDEM_ARG_MAX_NUM_SEQS; a switch takes true/false/1/0), as llama.cpp's
// server reads LLAMA_ARG_*, so that a container or a Kubernetes ConfigMap can
// set flags without a command line. A flag on the command line wins; `tandem
// SUB --help` names each variable.
#ifndef TANDEM_CLI_FLAG_ENVIRONMENT_H_
#define TANDEM_CLI_FLAG_ENVIRONMENT_H_

#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"

namespace tandem::cli {

inline constexpr std::string_view kFlagEnvironmentPrefix = "TANDEM_ARG_";

// "max-num-seqs" -> "TANDEM_ARG_MAX_NUM_SEQS".
std::string FlagEnvironmentName(std::string_view long_name);

// Binds every option with a long name, of `app` and its subcommands, to its
// variable.
void BindFlagsToEnvironment(CLI::App& app);

// This process's environment less the TANDEM_ARG_ variables, for children:
// `tandem serve` gives its workers every flag they need on their command
// lines, and a variable meant for serve (TANDEM_ARG_DEVICE, ...) must not set
// a worker's flag of the same name as well.
std::vector<std::string> EnvironmentForChildren();

}  // namespace tandem::cli

#endif  // TANDEM_CLI_FLAG_ENVIRONMENT_H_
