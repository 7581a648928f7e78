// `tandem gpu-worker`: the gpu_worker process. Serves the Worker gRPC service
// on --listen (port 0: any free port), prints `listening on HOST:PORT` on
// stdout once it accepts calls, registers with the coordinator's Registry
// and heartbeats, and runs until SIGTERM/SIGINT or a Shutdown call; then it
// stops serving, closes its shared-memory rings and exits 0.
#ifndef TANDEM_CLI_GPU_WORKER_COMMAND_H_
#define TANDEM_CLI_GPU_WORKER_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct GpuWorkerOptions {
  std::string coordinator;  // HOST:PORT of the Registry; empty: do not register
  std::string listen = "127.0.0.1:0";
  std::string advertise;    // address given to the coordinator; default: listen's, bound port
  std::string device = "host";
  int32_t rank = 0;
  int threads = 0;  // OpenMP threads of the host device; 0 = all cores
};

CLI::App* AddGpuWorkerCommand(CLI::App& app, GpuWorkerOptions& opts);
int RunGpuWorker(const GpuWorkerOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_GPU_WORKER_COMMAND_H_
