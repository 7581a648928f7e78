// `tandem cpu-worker`: the cpu_worker process. It serves one gpu_worker over
// shared-memory rings the gpu_worker created: the CPU-resident routed experts
// (<rings>-req / -rep) and/or, with --attention, Neo-style CPU attention over
// a CPU KV cache it owns (<rings>-attn-req / -attn-rep), each pair on a
// thread of its own. With --coordinator it registers and heartbeats there.
#ifndef TANDEM_CLI_CPU_WORKER_COMMAND_H_
#define TANDEM_CLI_CPU_WORKER_COMMAND_H_

#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct CpuWorkerOptions {
  std::string model;
  std::string cpu_experts = "all";  // "none": no expert service
  std::string expert_rings;  // name prefix: <prefix>-req, <prefix>-rep (+ -attn-req, -attn-rep)
  std::string shard;        // "I/K": one of K cpu_workers sharing the experts; empty: all
  std::string coordinator;  // HOST:PORT of the Registry; empty: do not register
  std::string dtype = "auto";
  int64_t attach_timeout_s = 300;
  bool attention = false;     // serve CPU attention on <prefix>-attn-*
  int64_t cpu_kv_tokens = 0;  // the most CPU KV tokens a gpu_worker may ask for; 0 = any
};

CLI::App* AddCpuWorkerCommand(CLI::App& app, CpuWorkerOptions& opts);
int RunCpuWorker(const CpuWorkerOptions& opts);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_CPU_WORKER_COMMAND_H_
