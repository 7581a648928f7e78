#include "cli/cpu_worker_command.h"

#include <atomic>
#include <csignal>
#include <cstdio>

#include "absl/time/clock.h"
#include "common/checkpoint.h"
#include "common/shm/slot_ring.h"
#include "common/status_macros.h"
#include "cpu_worker/service/expert_server.h"

namespace tandem::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

absl::Status Run(const CpuWorkerOptions& o) {
  if (o.expert_rings.empty()) return absl::InvalidArgumentError("--expert-rings is required");
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(o.model));
  TANDEM_ASSIGN_OR_RETURN(ExpertPlacement placement, ParseCpuExperts(o.cpu_experts, ckpt->config()));
  const ops::ComputeType ct = o.dtype == "f32" ? ops::ComputeType::kF32 : ops::ComputeType::kBF16;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertServer> server,
                          ExpertServer::Create(*ckpt, placement, ct));
  // The gpu_worker creates the rings when the coordinator loads the model,
  // which may be after this process starts: retry until they exist.
  std::unique_ptr<shm::SlotRing> requests, replies;
  const absl::Time deadline = absl::Now() + absl::Seconds(o.attach_timeout_s);
  for (;;) {
    auto req = shm::SlotRing::Open(o.expert_rings + "-req", shm::RingRole::kConsumer);
    if (req.ok()) {
      TANDEM_ASSIGN_OR_RETURN(
          replies, shm::SlotRing::Open(o.expert_rings + "-rep", shm::RingRole::kProducer));
      requests = std::move(*req);
      break;
    }
    if (!absl::IsNotFound(req.status()) || absl::Now() > deadline || g_stop.load()) {
      return req.status();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  absl::Status s = server->Serve(*requests, *replies, g_stop);
  // The gpu_worker closing its rings is the normal end.
  if (absl::IsUnavailable(s)) return absl::OkStatus();
  return s;
}

}  // namespace

CLI::App* AddCpuWorkerCommand(CLI::App& app, CpuWorkerOptions& o) {
  CLI::App* cmd = app.add_subcommand("cpu-worker", "Run a cpu_worker: CPU experts for a gpu_worker");
  cmd->add_option("--model,-m", o.model, "Model: a Hugging Face directory or a .gguf file")->required();
  cmd->add_option("--cpu-experts", o.cpu_experts, "Experts computed here: all, none or N-per-layer")->capture_default_str();
  cmd->add_option("--expert-rings", o.expert_rings, "Shared-memory ring name prefix made by the gpu_worker")->required();
  cmd->add_option("--dtype", o.dtype, "GEMM dtype: auto, bf16 or f32")->capture_default_str();
  cmd->add_option("--attach-timeout", o.attach_timeout_s, "Seconds to wait for the gpu_worker's rings")->capture_default_str();
  return cmd;
}

int RunCpuWorker(const CpuWorkerOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    std::fprintf(stderr, "tandem cpu-worker: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
