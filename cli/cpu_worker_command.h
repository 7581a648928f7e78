// `tandem cpu-worker`: the cpu_worker process. In this version it serves the
// CPU-resident routed experts of one gpu_worker over shared-memory rings the
// gpu_worker created (registration with a coordinator comes with the service).
#ifndef TANDEM_CLI_CPU_WORKER_COMMAND_H_
#define TANDEM_CLI_CPU_WORKER_COMMAND_H_

#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct CpuWorkerOptions {
  std::string model;
  std::string cpu_experts = "all";
  std::string expert_rings;  // name prefix: <prefix>-req, <prefix>-rep
  std::string dtype = "auto";
  int64_t attach_timeout_s = 300;
};

CLI::App* AddCpuWorkerCommand(CLI::App& app, CpuWorkerOptions& opts);
int RunCpuWorker(const CpuWorkerOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_CPU_WORKER_COMMAND_H_
