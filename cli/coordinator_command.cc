#include "cli/coordinator_command.h"

#include <atomic>
#include <csignal>
#include <cstdio>

#include "absl/time/clock.h"
#include "cli/flag_sources.h"

namespace tandem::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

}  // namespace

CLI::App* AddCoordinatorCommand(CLI::App& app, CoordinatorOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "coordinator", "Run the coordinator alone; workers started elsewhere register with it");
  AddCoordinatorFlags(cmd, o);
  cmd->add_option("--registry-listen", o.registry_listen,
                  "HOST:PORT where workers register (0.0.0.0 for other machines)")
      ->capture_default_str();
  cmd->add_option("--rings,--expert-rings", o.rings,
                  "Shared-memory ring prefix the gpu_worker creates and the cpu_worker opens "
                  "(with --cpu-experts or --cpu-kv-blocks; default /tandem-experts)");
  return cmd;
}

int RunCoordinator(const CoordinatorOptions& opts) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  CoordinatorOptions o = opts;
  absl::Status applied = ApplyPolicyFile(&o);
  if (applied.ok()) applied = ApplyOverrideTensor(&o);
  if (!applied.ok()) {
    PrintCommandError("tandem coordinator", applied);
    return 1;
  }
  if ((o.cpu_experts != "none" || o.cpu_kv_blocks > 0) && o.rings.empty()) {
    o.rings = "/tandem-experts";
  }
  absl::StatusOr<std::unique_ptr<CoordinatorRuntime>> rt = CoordinatorRuntime::Start(o);
  if (!rt.ok()) {
    PrintCommandError("tandem coordinator", rt.status());
    return 1;
  }
  std::printf("registry on %s\n", (*rt)->registry_address().c_str());
  std::printf("serving %s on http://%s:%d\n", (*rt)->served_name().c_str(), o.host.c_str(),
              (*rt)->http_port());
  if ((*rt)->grpc_port() > 0) std::printf("gRPC API on %s:%d\n", o.host.c_str(), (*rt)->grpc_port());
  std::fflush(stdout);
  while (!g_stop.load()) absl::SleepFor(absl::Milliseconds(100));
  std::fprintf(stderr, "tandem coordinator: stopping\n");
  (*rt)->Stop();
  return 0;
}

}  // namespace tandem::cli
