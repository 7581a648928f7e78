// `tandem coordinator --model PATH`: the coordinator alone (worker registry,
// step driver, HTTP API), the way a container deployment runs it: workers
// are started on their own with `--coordinator HOST:PORT` and register. It
// prints `registry on HOST:PORT` and `serving NAME on http://HOST:PORT`, and
// runs until SIGTERM/SIGINT.
#ifndef TANDEM_CLI_COORDINATOR_COMMAND_H_
#define TANDEM_CLI_COORDINATOR_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/coordinator_runtime.h"

namespace tandem::cli {

CLI::App* AddCoordinatorCommand(CLI::App& app, CoordinatorOptions& opts);
int RunCoordinator(const CoordinatorOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_COORDINATOR_COMMAND_H_
