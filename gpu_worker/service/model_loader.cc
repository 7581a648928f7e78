#include "gpu_worker/service/model_loader.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/shm/expert_weight_store.h"
#include "common/status_macros.h"
#include "cpu_worker/perf/host_profile.h"
#include "gpu_worker/engine/shm_all_reduce.h"
#include "gpu_worker/engine/sharded_expert_offload.h"
#include "gpu_worker/engine/tensor_parallel.h"
#include "gpu_worker/engine/shm_expert_offload.h"

namespace tandem {
namespace {

// The figures HybriMoE's split weighs, measured: the device's own (its
// memory, GEMMs and link) and the host CPU's (cached per machine). Only for
// a device that measures itself (a GPU); on the host device both sides are
// the same cores and the split's default model stands. A measurement that
// fails is reported and the default model stands too: the split's choices
// change, its results do not.
std::optional<HardwareProfile> MeasuredProfile(const WorkerDevice& device) {
  if (device.measure == nullptr) return std::nullopt;
  HardwareProfile hw;
  absl::Status s = device.measure(&hw);
  absl::StatusOr<HardwareProfile> host =
      s.ok() ? perf::LoadOrMeasureHostProfile() : absl::StatusOr<HardwareProfile>(s);
  if (!host.ok()) {
    std::fprintf(stderr, "gpu_worker: expert cache costs from defaults: %s\n",
                 host.status().ToString().c_str());
    return std::nullopt;
  }
  hw.cpu = host->cpu;
  return hw;
}

constexpr int64_t kDefaultBlockSize = 16;
constexpr int64_t kDefaultSequences = 4;
constexpr int64_t kDefaultAttachMs = 60000;

int64_t LinearBytes(const ops::LinearWeight& w) { return w.nbytes(); }  // quantized blocks too
int64_t MlpBytes(const MlpWeights& m) {
  return LinearBytes(m.gate) + LinearBytes(m.up) + LinearBytes(m.down);
}
int64_t VecBytes(const std::vector<float>& v) { return static_cast<int64_t>(v.size()) * 4; }

// Waits (until `deadline`) in short slices so that a shutdown or a
// cancelled call is noticed; `what` names the rings in the error.
template <typename Offload>
absl::Status WaitForCpuWorker(Offload& offload, const char* what, absl::Time deadline,
                              absl::Duration timeout, const std::function<bool()>& cancelled) {
  absl::Status s;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    s = offload.WaitForWorker(std::clamp(left, absl::ZeroDuration(), absl::Milliseconds(100)));
    if (s.ok() || !absl::IsDeadlineExceeded(s) || left <= absl::ZeroDuration()) break;
    if (cancelled && cancelled()) {
      return absl::CancelledError("LoadModel cancelled while waiting for the cpu_worker");
    }
  }
  if (s.ok()) return s;
  // The cpu_worker answered (e.g. refused the CPU KV cache): its code.
  if (!absl::IsDeadlineExceeded(s) && !absl::IsUnavailable(s)) return s;
  return absl::UnavailableError(absl::StrCat(
      "LoadModel: no cpu_worker opened the ", what, " rings ", offload.request_ring(), " and ",
      offload.reply_ring(), " within ", absl::FormatDuration(timeout), " (", s.message(), ")"));
}

}  // namespace

int64_t WeightBytes(const ModelWeights& w) {
  int64_t n = w.token_embd.nbytes + VecBytes(w.output_norm);
  // A tied head is the embedding converted, or the same bytes in place.
  if (w.lm_head.data() != w.token_embd.data) n += LinearBytes(w.lm_head);
  for (const LayerWeights& l : w.layers) {
    n += VecBytes(l.attn_norm) + VecBytes(l.ffn_norm) + VecBytes(l.q_bias) + VecBytes(l.k_bias) +
         VecBytes(l.v_bias) + VecBytes(l.q_norm) + VecBytes(l.k_norm) + VecBytes(l.o_bias);
    n += LinearBytes(l.q) + LinearBytes(l.k) + LinearBytes(l.v) + LinearBytes(l.o);
    if (!l.moe) {
      n += MlpBytes(l.mlp);
      continue;
    }
    n += LinearBytes(l.router);
    for (const MlpWeights& e : l.experts) n += MlpBytes(e);
    if (l.has_shared_expert) n += MlpBytes(l.shared) + VecBytes(l.shared_gate);
  }
  return n;
}

absl::StatusOr<EngineOptions> EngineOptionsFor(const proto::LoadModelRequest& req,
                                               const ModelConfig& c) {
  if (req.max_context() < 0 || req.kv_blocks() < 0 || req.block_size() < 0) {
    return absl::InvalidArgumentError(
        "LoadModel: max_context, kv_blocks and block_size must be >= 0");
  }
  EngineOptions o;
  o.block_size = req.block_size() > 0 ? req.block_size() : kDefaultBlockSize;
  // The engine's own rule for the context (kept in step so KV is sized for it).
  int64_t ctx = req.max_context() > 0 ? req.max_context() : std::min<int64_t>(c.max_position, 8192);
  if (c.sliding_window > 0) ctx = std::min(ctx, c.sliding_window);
  o.max_context = ctx;
  if (req.weight_budget_bytes() < 0) {
    return absl::InvalidArgumentError("LoadModel: weight_budget_bytes must be >= 0");
  }
  o.weight_budget_bytes = req.weight_budget_bytes();
  o.streamed_ffn_layers.assign(req.streamed_ffn_layers().begin(),
                               req.streamed_ffn_layers().end());
  o.max_sequences = req.kv_blocks() > 0
                        ? std::max<int64_t>(1, req.kv_blocks() * o.block_size / ctx)
                        : kDefaultSequences;
  return o;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> RemoteExperts(
    const proto::LoadModelRequest& req, const ModelConfig& c) {
  const auto& layers = req.cpu_placement().experts();
  if (static_cast<int64_t>(layers.size()) > c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("LoadModel: cpu_placement lists ", layers.size(),
                                                   " layers; the model has ", c.num_layers));
  }
  std::vector<std::vector<int32_t>> remote(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < layers.size(); ++l) {
    const auto& ex = layers[l].experts();
    if (!ex.empty() && !c.IsMoeLayer(l)) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadModel: cpu_placement lists experts for dense layer ", l));
    }
    for (int32_t e : ex) {
      if (e < 0 || e >= c.num_experts) {
        return absl::InvalidArgumentError(absl::StrCat("LoadModel: cpu_placement layer ", l,
                                                       " lists expert ", e, " of ", c.num_experts));
      }
    }
    remote[static_cast<size_t>(l)].assign(ex.begin(), ex.end());
  }
  return remote;
}

absl::StatusOr<LoadedModel> LoadModelForWorker(const proto::LoadModelRequest& req,
                                               const std::function<bool()>& cancelled,
                                               const WorkerDevice& device) {
  if (req.model_path().empty()) return absl::InvalidArgumentError("LoadModel: model_path is empty");
  if (req.attach_timeout_ms() < 0) {
    return absl::InvalidArgumentError("LoadModel: attach_timeout_ms must be >= 0");
  }
  if (req.cpu_kv_tokens() < 0) {
    return absl::InvalidArgumentError("LoadModel: cpu_kv_tokens must be >= 0");
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(req.model_path()));
  const ModelConfig& c = ckpt->config();
  TANDEM_ASSIGN_OR_RETURN(EngineOptions eo, EngineOptionsFor(req, c));
  TANDEM_ASSIGN_OR_RETURN(auto remote, RemoteExperts(req, c));
  const bool any_remote =
      std::any_of(remote.begin(), remote.end(), [](const auto& l) { return !l.empty(); });
  if (req.expert_cache_slots() < 0) {
    return absl::InvalidArgumentError("LoadModel: expert_cache_slots must be >= 0");
  }
  // The expert cache copies the device's share in from its host copies and
  // gives the cpu_workers, which must then hold every expert, whichever
  // the step's split puts on the CPU.
  if (req.expert_cache_slots() > 0 && any_remote) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      if (c.IsMoeLayer(l) &&
          static_cast<int64_t>(remote[static_cast<size_t>(l)].size()) != c.num_experts) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LoadModel: with expert_cache_slots the cpu_workers must hold every expert; "
            "cpu_placement gives layer ", l, " ", remote[static_cast<size_t>(l)].size(), " of ",
            c.num_experts));
      }
    }
  }

  LoadedModel m;
  const auto& tp = req.tensor_parallel();
  if (tp.size() > 1) {
    if (any_remote || req.cpu_kv_tokens() > 0) {
      return absl::InvalidArgumentError(
          "LoadModel: tensor parallelism does not combine with CPU experts or CPU attention yet");
    }
    // Checked before joining the group, so that every rank of a model that
    // does not split fails at once instead of waiting for its peers.
    TANDEM_RETURN_IF_ERROR(CheckTensorParallel(c, {tp.rank(), tp.size()}));
    ShmAllReduceOptions ao;
    ao.cancelled = cancelled;
    ao.timeout = absl::Milliseconds(req.attach_timeout_ms() > 0 ? req.attach_timeout_ms()
                                                                : kDefaultAttachMs);
    absl::StatusOr<std::unique_ptr<AllReduce>> group =
        device.join_group != nullptr
            ? device.join_group(tp.group_id(), tp.rank(), tp.size())
            : absl::StatusOr<std::unique_ptr<AllReduce>>(
                  ShmAllReduce::Create(tp.group_id(), tp.rank(), tp.size(), ao));
    if (!group.ok()) {
      return absl::Status(group.status().code(),
                          absl::StrCat("LoadModel: tensor-parallel group: ",
                                       group.status().message()));
    }
    m.tensor_parallel = *std::move(group);
    eo.tensor_parallel = m.tensor_parallel.get();
  } else if (tp.size() < 0 || tp.rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("LoadModel: tensor-parallel rank ", tp.rank(),
                                                   " of ", tp.size(), " ranks"));
  }
  std::vector<std::unique_ptr<ShmExpertOffload>> expert_shards;
  if (any_remote) {
    if (req.data_segment().empty()) {
      return absl::InvalidArgumentError(
          "LoadModel: cpu_placement lists experts but data_segment (the ring prefix) is empty");
    }
    if (req.cpu_workers() < 0) {
      return absl::InvalidArgumentError("LoadModel: cpu_workers must be >= 0");
    }
    // The rings exist before the weights load, so the cpu_workers can attach meanwhile.
    const int64_t shards = std::max(1, req.cpu_workers());
    for (int64_t i = 0; i < shards; ++i) {
      ShmOffloadOptions so;
      so.name_prefix = ShardRingPrefix(req.data_segment(), i, shards);
      so.hidden = c.hidden_size;
      // One slot holds a whole 512-token prefill chunk's routed rows.
      so.slot_bytes =
          std::max<int64_t>(1 << 20, (512 * c.num_experts_per_tok + 64) * c.hidden_size * 4);
      so.slot_count = 2;
      TANDEM_ASSIGN_OR_RETURN(auto shard,
                              ShmExpertOffload::Create(so, ShardExperts(remote, i, shards)));
      expert_shards.push_back(std::move(shard));
    }
  }
  if (req.cpu_kv_tokens() > 0) {
    if (req.data_segment().empty()) {
      return absl::InvalidArgumentError(
          "LoadModel: cpu_kv_tokens asks for CPU attention but data_segment (the ring prefix) "
          "is empty");
    }
    ShmAttentionOptions ao;
    // On the first cpu_worker: its ring prefix is the shard-0 one.
    ao.name_prefix = ShardRingPrefix(req.data_segment(), 0, std::max(1, req.cpu_workers()));
    ao.shape = CpuAttentionShapeFor(c, eo.block_size, req.cpu_kv_tokens());
    // One slot holds a whole 512-token prefill chunk's q/k/v rows.
    ao.slot_bytes = AttentionSlotBytesFor(ao.shape, 512);
    ao.slot_count = 2;
    TANDEM_ASSIGN_OR_RETURN(m.attention, ShmAttentionOffload::Create(ao));
  }
  // The experts the cpu_workers compute are not loaded here, but with the
  // expert cache every expert keeps its host copy here (checked above).
  if (req.expert_cache_slots() == 0) eo.remote_experts = remote;
  eo.device = device.make;
  eo.expert_cache.capacity_per_layer = req.expert_cache_slots();
  if (req.expert_cache_slots() > 0) eo.expert_cache.profile = MeasuredProfile(device);
  if (req.expert_prefetch() < 0 || req.micro_batch_size() < 0) {
    return absl::InvalidArgumentError("LoadModel: expert_prefetch and micro_batch_size must be >= 0");
  }
  if ((req.experts_on_device_only() || req.expert_prefetch() > 0) &&
      req.expert_cache_slots() == 0) {
    return absl::InvalidArgumentError(
        "LoadModel: experts_on_device_only and expert_prefetch need expert_cache_slots");
  }
  eo.expert_cache.cpu_share = !req.experts_on_device_only();
  if (req.expert_prefetch() > 0) eo.expert_cache.prefetch_budget = req.expert_prefetch();
  eo.micro_batch_size = req.micro_batch_size();
  eo.cpu_ffn_rows.assign(req.cpu_ffn_rows().begin(), req.cpu_ffn_rows().end());
  eo.prefill_gpu_tokens = req.prefill_gpu_tokens();
  const int64_t max_sequences = eo.max_sequences;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(std::move(ckpt), eo));
  if (!engine->load_notice().empty()) {
    std::fprintf(stderr, "gpu_worker: %s\n", engine->load_notice().c_str());
  }
  const absl::Duration attach = absl::Milliseconds(
      req.attach_timeout_ms() > 0 ? req.attach_timeout_ms() : kDefaultAttachMs);
  const absl::Time deadline = absl::Now() + attach;
  for (size_t i = 0; i < expert_shards.size(); ++i) {
    TANDEM_RETURN_IF_ERROR(
        WaitForCpuWorker(*expert_shards[i], "expert", deadline, attach, cancelled));
    // The cpu_worker made its weight store before opening the rings.
    const auto n = static_cast<int64_t>(expert_shards.size());
    const std::string store_name = shm::ExpertWeightStoreName(
        ShardRingPrefix(req.data_segment(), static_cast<int64_t>(i), n));
    absl::StatusOr<std::unique_ptr<shm::HostWeightStore>> store =
        shm::HostWeightStore::Open(store_name);
    if (!store.ok()) {
      return absl::UnavailableError(absl::StrCat("LoadModel: the cpu_worker's weight store ",
                                                 store_name, ": ", store.status().message()));
    }
    TANDEM_RETURN_IF_ERROR(shm::VerifyExpertWeightStore(
        **store, engine->checkpoint(), ShardExperts(remote, static_cast<int64_t>(i), n)));
    m.expert_stores.push_back(*std::move(store));
  }
  if (expert_shards.size() == 1) {
    m.offload = std::move(expert_shards[0]);
  } else if (!expert_shards.empty()) {
    std::vector<std::unique_ptr<ExpertOffload>> shards(
        std::make_move_iterator(expert_shards.begin()),
        std::make_move_iterator(expert_shards.end()));
    TANDEM_ASSIGN_OR_RETURN(m.offload, ShardedExpertOffload::Create(std::move(shards)));
  }
  if (m.offload) engine->SetExpertOffload(m.offload.get());
  if (m.attention) {
    TANDEM_RETURN_IF_ERROR(
        WaitForCpuWorker(*m.attention, "attention", deadline, attach, cancelled));
    engine->SetAttentionOffload(m.attention.get());
  }
  m.response.set_weight_bytes(WeightBytes(engine->weights()));
  const int64_t blocks_per_seq = (engine->max_context() + eo.block_size - 1) / eo.block_size;
  m.response.set_kv_blocks(blocks_per_seq * max_sequences);
  m.response.set_cpu_kv_tokens(req.cpu_kv_tokens());
  m.executor = std::make_unique<StepExecutor>(std::move(engine));
  return m;
}

}  // namespace tandem
