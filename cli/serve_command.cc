#include "cli/serve_command.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/child_process.h"
#include "cli/flag_sources.h"
#include "cli/openmp_environment.h"
#include "common/shm/shm_segment.h"
#include "common/status_macros.h"
#include "gpu_worker/device_spec.h"
#include "gpu_worker/engine/sharded_expert_offload.h"

namespace tandem::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

// One supervised worker: started again when it ends, while serving.
struct Supervised {
  std::string name;
  std::vector<std::string> args;
  std::unique_ptr<ChildProcess> child;
  absl::Status Start() {
    TANDEM_ASSIGN_OR_RETURN(child, ChildProcess::SpawnSelf(args));
    std::fprintf(stderr, "tandem serve: started %s (pid %d)\n", name.c_str(), child->pid());
    return absl::OkStatus();
  }
};

absl::Status Run(const ServeOptions& so) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  CoordinatorOptions o = so.coordinator;
  o.registry_listen = "127.0.0.1:0";  // the workers are local children
  // First: a policy may place experts or KV on a cpu_worker to start.
  TANDEM_RETURN_IF_ERROR(ApplyPolicyFile(&o));
  TANDEM_RETURN_IF_ERROR(ApplyOverrideTensor(&o));
  // Each rank's device, checked before anything starts.
  const int ranks = std::max(1, o.tensor_parallel);
  if (ranks > 1 && absl::StartsWith(so.device, "cuda:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device ", so.device, " names one GPU; with --tensor-parallel ", ranks,
        " use --device cuda (rank r on GPU r)"));
  }
  std::vector<std::string> devices;
  for (int r = 0; r < ranks; ++r) {
    devices.push_back(so.device == "cuda" && ranks > 1 ? absl::StrCat("cuda:", r) : so.device);
    TANDEM_RETURN_IF_ERROR(DeviceFactoryFor(devices.back()).status());
  }
  const bool cpu_worker = o.cpu_experts != "none" || o.cpu_kv_blocks > 0;
  if (cpu_worker) o.rings = absl::StrCat("/tandem-", getpid(), "-experts");
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorRuntime> rt, CoordinatorRuntime::Start(o));
  std::printf("serving %s on http://%s:%d\n", rt->served_name().c_str(), o.host.c_str(),
              rt->http_port());
  if (rt->grpc_port() > 0) std::printf("gRPC API on %s:%d\n", o.host.c_str(), rt->grpc_port());
  std::fflush(stdout);

  // A lone gpu_worker computes alone: it may spin briefly between its
  // parallel regions (openmp_environment.h); beside cpu_workers or other
  // ranks it must not.
  if (!cpu_worker && ranks == 1) SpinBeforeSleepInChildren();
  const std::string segment_prefix = absl::StrCat("/tandem-", getpid(), "-");
  std::vector<Supervised> workers;
  // One gpu_worker per tensor-parallel rank; ranks on this machine share
  // its cores instead of each spinning up a thread per core.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = ranks > 1 ? std::max(1, static_cast<int>(cores) / ranks) : 0;
  for (int r = 0; r < ranks; ++r) {
    workers.push_back({"gpu_worker",
                       {"gpu-worker", "--listen", "127.0.0.1:0", "--coordinator",
                        rt->registry_address(), "--device", devices[static_cast<size_t>(r)],
                        "--rank", absl::StrCat(r),
                        "--threads", absl::StrCat(threads)},
                       nullptr});
  }
  // Expert e on cpu_worker e % K; CPU attention on the first.
  const int k = cpu_worker ? std::max(1, o.cpu_workers) : 0;
  for (int i = 0; i < k; ++i) {
    std::vector<std::string> args = {"cpu-worker", "--model", o.model, "--cpu-experts",
                                     o.cpu_experts, "--rings", ShardRingPrefix(o.rings, i, k),
                                     "--coordinator", rt->registry_address()};
    if (k > 1) args.insert(args.end(), {"--shard", absl::StrCat(i, "/", k)});
    if (i == 0 && o.cpu_kv_blocks > 0) {
      args.insert(args.end(), {"--attention", "--cpu-kv-tokens",
                               absl::StrCat(o.cpu_kv_blocks * 16)});
    }
    workers.push_back({"cpu_worker", std::move(args), nullptr});
  }
  for (auto& w : workers) TANDEM_RETURN_IF_ERROR(w.Start());

  while (!g_stop.load()) {
    absl::SleepFor(absl::Milliseconds(100));
    for (auto& w : workers) {
      if (auto rc = w.child->Poll()) {
        std::fprintf(stderr, "tandem serve: %s exited with status %d; restarting\n",
                     w.name.c_str(), *rc);
        // A lost cpu_worker fails the gpu_worker's next step; the driver
        // then reloads the model there, which makes the rings anew and waits
        // for this new cpu_worker to attach.
        // What a killed worker created (e.g. a cpu_worker's weight store)
        // is removed; segments of live processes are left alone.
        (void)shm::RemoveStaleSegments(segment_prefix);
        TANDEM_RETURN_IF_ERROR(w.Start());
      }
    }
  }
  std::fprintf(stderr, "tandem serve: stopping\n");
  rt->Stop();
  for (auto& w : workers) w.child.reset();  // SIGTERM, then SIGKILL after 5 s
  (void)shm::RemoveStaleSegments(segment_prefix);
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddServeCommand(CLI::App& app, ServeOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model over the OpenAI-compatible HTTP API, with its workers as children");
  AddCoordinatorFlags(cmd, o.coordinator);
  cmd->add_option("--device", o.device,
                  "The gpu_workers' device: host (CPU kernels), cuda (rank r on GPU r) or cuda:N "
                  "(builds with CUDA)")
      ->capture_default_str();
  return cmd;
}

int RunServe(const ServeOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    PrintCommandError("tandem serve", s);
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
