// Where a flag's value came from, for error messages. A value set by a
// TANDEM_ARG_ variable (flag_environment.h) or a --config file
// (flag_config_file.h) is not on the command line the user is looking at,
// so an error that names such a flag also says where its value was set:
//
//   tandem serve: --max-num-seqs and --max-num-batched-tokens must be > 0
//   tandem serve: --max-num-seqs=0 was set by --config /etc/tandem.yaml
#ifndef TANDEM_CLI_FLAG_SOURCES_H_
#define TANDEM_CLI_FLAG_SOURCES_H_

#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace tandem::cli {

struct FlagSource {
  std::string flag;    // "--max-num-seqs"
  std::string value;   // as set
  std::string origin;  // "TANDEM_ARG_MAX_NUM_SEQS" or "--config FILE"
};

// The flags of `sub` not on its command line `args` whose variable is set:
// by the config file when its name is in `config_variables`, else by the
// environment. Call after ApplyConfigFile.
std::vector<FlagSource> FindFlagSources(const CLI::App& sub, const std::vector<std::string>& args,
                                        const std::string& config_file,
                                        const std::vector<std::string>& config_variables);

// One line "<prefix>: --flag=value was set by ORIGIN" for each source whose
// flag `message` names; "" when it names none.
std::string ExplainFlagSources(std::string_view prefix, std::string_view message,
                               const std::vector<FlagSource>& sources);

// The sources of this process's subcommand, recorded once by main().
void RecordFlagSources(std::vector<FlagSource> sources);
const std::vector<FlagSource>& RecordedFlagSources();

// Prints "<prefix>: <message>" to stderr, and where the flags it names came
// from. Every subcommand reports its failure through this.
void PrintCommandError(std::string_view prefix, const absl::Status& status);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_FLAG_SOURCES_H_
