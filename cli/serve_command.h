// `tandem serve --model PATH`: the coordinator in this process (worker
// registry, step driver, OpenAI-compatible HTTP API) with its workers as
// supervised child processes — a gpu_worker and, with --cpu-experts, a
// cpu_worker — restarted when they die. SIGTERM/SIGINT stop everything.
#ifndef TANDEM_CLI_SERVE_COMMAND_H_
#define TANDEM_CLI_SERVE_COMMAND_H_

#include <string>

#include "CLI/CLI.hpp"
#include "cli/coordinator_runtime.h"

namespace tandem::cli {

struct ServeOptions {
  CoordinatorOptions coordinator;
  // The gpu_workers' device: host, cuda (rank r on GPU r) or cuda:N (one
  // rank on GPU N).
  std::string device = "host";
};

CLI::App* AddServeCommand(CLI::App& app, ServeOptions& opts);
int RunServe(const ServeOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_SERVE_COMMAND_H_
