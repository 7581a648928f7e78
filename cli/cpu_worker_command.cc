#include "cli/cpu_worker_command.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/flag_sources.h"
#include "common/checkpoint.h"
#include "common/shm/expert_weight_store.h"
#include "common/shm/huge_pages.h"
#include "common/shm/slot_ring.h"
#include "common/status_macros.h"
#include "cpu_worker/service/attention_server.h"
#include "cpu_worker/service/expert_server.h"
#include "gpu_worker/engine/sharded_expert_offload.h"
#include "gpu_worker/service/registration.h"

namespace tandem::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct RingPair {
  std::unique_ptr<shm::SlotRing> requests, replies;
};

// Opens one ring, retrying while it does not exist yet or its creator is
// still initialising it (kUnavailable).
absl::StatusOr<std::unique_ptr<shm::SlotRing>> OpenRing(const std::string& name,
                                                        shm::RingRole role, absl::Time deadline) {
  for (;;) {
    auto ring = shm::SlotRing::Open(name, role);
    const bool not_yet = absl::IsNotFound(ring.status()) || absl::IsUnavailable(ring.status());
    if (ring.ok() || !not_yet || absl::Now() > deadline || g_stop.load()) {
      return ring;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// The gpu_worker creates the rings when the coordinator loads the model,
// which may be after this process starts, and creates the request ring just
// before the reply ring: retry each until it exists (giving up the first
// would close it under the gpu_worker).
absl::StatusOr<RingPair> OpenRings(const std::string& requests, const std::string& replies,
                                   absl::Time deadline) {
  RingPair p;
  TANDEM_ASSIGN_OR_RETURN(p.requests, OpenRing(requests, shm::RingRole::kConsumer, deadline));
  TANDEM_ASSIGN_OR_RETURN(p.replies, OpenRing(replies, shm::RingRole::kProducer, deadline));
  return p;
}

// "I/K": this process computes the experts e with e % K == I of the placement
// (the gpu_worker splits them the same way); empty: all of them.
absl::StatusOr<ExpertPlacement> ApplyShard(const std::string& shard, ExpertPlacement placement) {
  if (shard.empty()) return placement;
  const std::vector<std::string> parts = absl::StrSplit(shard, '/');
  int64_t i = -1, k = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &i) || !absl::SimpleAtoi(parts[1], &k) ||
      k < 1 || i < 0 || i >= k) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard must be I/K with 0 <= I < K, got \"", shard, "\""));
  }
  return ShardExperts(placement, i, k);
}

absl::Status Run(const CpuWorkerOptions& o) {
  if (o.expert_rings.empty()) return absl::InvalidArgumentError("--expert-rings is required");
  const bool experts = o.cpu_experts != "none";
  if (!experts && !o.attention) {
    return absl::InvalidArgumentError(
        "nothing to serve: --cpu-experts none without --attention");
  }
  if (o.cpu_kv_tokens < 0) return absl::InvalidArgumentError("--cpu-kv-tokens must be >= 0");
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(o.model));

  // Build the services first (loading expert weights takes a while), then
  // attach, so that once the rings are open every request is answered.
  std::unique_ptr<shm::HostWeightStore> weight_store;  // before the server using it
  std::unique_ptr<ExpertServer> expert_server;
  if (experts) {
    TANDEM_ASSIGN_OR_RETURN(ExpertPlacement placement,
                            ParseCpuExperts(o.cpu_experts, ckpt->config()));
    TANDEM_ASSIGN_OR_RETURN(placement, ApplyShard(o.shard, std::move(placement)));
    const ops::ComputeType ct =
        o.dtype == "f32"         ? ops::ComputeType::kF32
        : o.dtype == "quantized" ? ops::ComputeType::kQuantized
                                 : ops::ComputeType::kBF16;
    // The experts live in a host weight store the gpu_worker maps too. A
    // store left by a predecessor that was killed is removed first.
    const std::string store_name = shm::ExpertWeightStoreName(o.expert_rings);
    (void)shm::RemoveStaleSegments(store_name);
    TANDEM_ASSIGN_OR_RETURN(weight_store,
                            shm::BuildExpertWeightStore(*ckpt, placement, store_name));
    // The experts were just written, so their pages are what they will be.
    if (absl::StatusOr<int64_t> huge = shm::ShmemHugePageBytes(); huge.ok()) {
      const std::string warning = shm::WeightStorePageWarning(
          "expert weights", weight_store->used_bytes(), *huge, shm::ShmHugePagePolicy());
      if (!warning.empty()) std::fprintf(stderr, "tandem cpu-worker: %s\n", warning.c_str());
    }
    TANDEM_ASSIGN_OR_RETURN(expert_server, ExpertServer::CreateFromStore(
                                               *weight_store, ckpt->config(), placement, ct));
    // Once the gpu_worker sends work it has mapped the store: drop the name,
    // so that nothing is left in /dev/shm whichever process dies later.
    expert_server->SetOnFirstRequest([store = weight_store.get()] { (void)store->Unlink(); });
    // GGUF k-quants were converted (or mapped from the cache) as the store was
    // filled: say so, as the gpu_worker does for its own weights.
    if (const std::string note = ckpt->LoadNote(); !note.empty()) {
      std::fprintf(stderr, "tandem cpu-worker: %s\n", note.c_str());
    }
  }
  std::unique_ptr<AttentionServer> attention_server;
  if (o.attention) {
    TANDEM_ASSIGN_OR_RETURN(attention_server,
                            AttentionServer::Create(ckpt->config(), o.cpu_kv_tokens));
  }

  // Known to the coordinator (health, metrics, logs) while it runs; the data
  // path stays the rings.
  std::unique_ptr<Registration> registration;
  if (!o.coordinator.empty()) {
    RegistrationOptions ro;
    ro.coordinator = o.coordinator;
    ro.self.set_kind(proto::WORKER_KIND_CPU);
    ro.self.set_address(absl::StrCat("shm:", o.expert_rings));
    ro.self.set_device("cpu");
    ro.self.set_pid(getpid());
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    ro.self.set_hostname(host);
    TANDEM_ASSIGN_OR_RETURN(registration, Registration::Start(std::move(ro)));
  }

  const absl::Time deadline = absl::Now() + absl::Seconds(o.attach_timeout_s);
  RingPair expert_rings, attention_rings;
  if (experts) {
    TANDEM_ASSIGN_OR_RETURN(expert_rings,
                            OpenRings(o.expert_rings + "-req", o.expert_rings + "-rep", deadline));
  }
  if (o.attention) {
    TANDEM_ASSIGN_OR_RETURN(attention_rings, OpenRings(o.expert_rings + "-attn-req",
                                                       o.expert_rings + "-attn-rep", deadline));
  }

  // One thread per ring pair: a ring endpoint is single-threaded, and the
  // gpu_worker may wait on either pair. When one service ends (its gpu_worker
  // closed the rings or died) the other is stopped too.
  absl::Status expert_status, attention_status;
  std::thread attention_thread;
  if (o.attention) {
    attention_thread = std::thread([&] {
      attention_status = attention_server->Serve(*attention_rings.requests,
                                                 *attention_rings.replies, g_stop);
      g_stop.store(true);
    });
  }
  if (experts) {
    expert_status = expert_server->Serve(*expert_rings.requests, *expert_rings.replies, g_stop);
    g_stop.store(true);
  }
  if (attention_thread.joinable()) attention_thread.join();
  // The gpu_worker closing its rings is the normal end.
  for (const absl::Status& s : {expert_status, attention_status}) {
    if (!s.ok() && !absl::IsUnavailable(s)) return s;
  }
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddCpuWorkerCommand(CLI::App& app, CpuWorkerOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "cpu-worker", "Run a cpu_worker: CPU experts and/or CPU attention for a gpu_worker");
  cmd->add_option("--model,-m", o.model, "Model: a Hugging Face directory or a .gguf file")->required();
  cmd->add_option("--cpu-experts", o.cpu_experts, "Experts computed here: all, none or N-per-layer")->capture_default_str();
  cmd->add_option("--expert-rings,--rings", o.expert_rings, "Shared-memory ring name prefix made by the gpu_worker")->required();
  cmd->add_flag("--attention", o.attention, "Serve CPU attention (Neo) on <rings>-attn-req/-attn-rep, with a CPU KV cache held here");
  cmd->add_option("--cpu-kv-tokens", o.cpu_kv_tokens, "Most CPU KV tokens a gpu_worker may allocate here; 0 = what it asks for")->capture_default_str();
  cmd->add_option("--shard", o.shard, "I/K: compute only the experts e with e % K == I (one of K cpu_workers)");
  cmd->add_option("--coordinator", o.coordinator, "HOST:PORT of the coordinator's registry to register with (optional)");
  cmd->add_option("--dtype", o.dtype, "GEMM dtype: auto, bf16, f32 or quantized")->capture_default_str();
  cmd->add_option("--attach-timeout", o.attach_timeout_s, "Seconds to wait for the gpu_worker's rings")->capture_default_str();
  return cmd;
}

int RunCpuWorker(const CpuWorkerOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    PrintCommandError("tandem cpu-worker", s);
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
