#include "cpu_worker/service/expert_server.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/shm/expert_weight_store.h"
#include "absl/strings/strip.h"
#include "common/expert_wire.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

int64_t Key(int64_t layer, int64_t expert) { return (layer << 20) | expert; }

}  // namespace

absl::Status CheckCpuExpertsApply(const std::string& spec, const ModelConfig& c) {
  if (spec == "none" || c.is_moe()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--cpu-experts ", spec, ": the model has no routed experts (a dense model)"));
}

absl::StatusOr<ExpertPlacement> ParseCpuExperts(const std::string& spec, const ModelConfig& c) {
  ExpertPlacement p(static_cast<size_t>(c.num_layers));
  // Experts per layer: one count for all, or (a comma list) one per layer.
  std::vector<int64_t> counts;
  if (spec == "none") return p;
  if (spec == "all") {
    counts.assign(static_cast<size_t>(c.num_layers), c.num_experts);
  } else if (absl::StrContains(spec, ',')) {
    for (absl::string_view part : absl::StrSplit(spec, ',')) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(part, &n) || n < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--cpu-experts ", spec, ": '", part, "' is not a count"));
      }
      counts.push_back(n);
    }
    if (static_cast<int64_t>(counts.size()) != c.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("--cpu-experts ", spec, ": ", counts.size(),
                                                     " counts for ", c.num_layers, " layers"));
    }
  } else {
    absl::string_view s(spec);
    int64_t n = 0;
    if (absl::ConsumePrefix(&s, "first-") && absl::ConsumeSuffix(&s, "-layers") &&
        absl::SimpleAtoi(s, &n) && n >= 0) {
      // Every expert of layers 0..N-1 (llama.cpp's --n-cpu-moe N, which
      // takes an N past the last layer as all of them).
      for (int64_t l = 0; l < c.num_layers; ++l) counts.push_back(l < n ? c.num_experts : 0);
    } else if (s = spec,
               absl::ConsumeSuffix(&s, "-per-layer") && absl::SimpleAtoi(s, &n) && n >= 0) {
      counts.assign(static_cast<size_t>(c.num_layers), n);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cpu-experts must be all, none, N-per-layer, first-N-layers or one count per layer "
          "(N0,N1,...), got '",
          spec, "'"));
    }
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const int64_t n = counts[static_cast<size_t>(l)];
    if (n > c.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat("--cpu-experts ", spec, ": the model has ",
                                                     c.num_experts, " experts per layer"));
    }
    if (!c.IsMoeLayer(l)) continue;
    for (int64_t e = 0; e < n; ++e) p[static_cast<size_t>(l)].push_back(static_cast<int32_t>(e));
  }
  return p;
}

absl::StatusOr<std::unique_ptr<ExpertServer>> ExpertServer::Create(
    const Checkpoint& ckpt, const ExpertPlacement& placement, ops::ComputeType prefer) {
  const ModelConfig& c = ckpt.config();
  if (static_cast<int64_t>(placement.size()) > c.num_layers) {
    return absl::InvalidArgumentError("expert placement has more layers than the model");
  }
  auto s = std::unique_ptr<ExpertServer>(new ExpertServer());
  s->hidden_ = c.hidden_size;
  for (size_t l = 0; l < placement.size(); ++l) {
    for (int32_t e : placement[l]) {
      if (!c.IsMoeLayer(static_cast<int64_t>(l)) || e < 0 || e >= c.num_experts) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", l, " has no routed expert ", e));
      }
      TANDEM_ASSIGN_OR_RETURN(ops::MlpWeights m,
                              ops::LoadExpertMlp(ckpt, static_cast<int64_t>(l), e, prefer));
      s->experts_.emplace(Key(static_cast<int64_t>(l), e), std::move(m));
    }
  }
  return s;
}

absl::StatusOr<std::unique_ptr<ExpertServer>> ExpertServer::CreateFromStore(
    const shm::HostWeightStore& store, const ModelConfig& c, const ExpertPlacement& placement,
    ops::ComputeType prefer) {
  if (static_cast<int64_t>(placement.size()) > c.num_layers) {
    return absl::InvalidArgumentError("expert placement has more layers than the model");
  }
  auto s = std::unique_ptr<ExpertServer>(new ExpertServer());
  s->hidden_ = c.hidden_size;
  for (size_t l = 0; l < placement.size(); ++l) {
    for (int32_t e : placement[l]) {
      if (!c.IsMoeLayer(static_cast<int64_t>(l)) || e < 0 || e >= c.num_experts) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", l, " has no routed expert ", e));
      }
      ops::LinearWeight* parts[3];
      ops::MlpWeights m;
      parts[0] = &m.gate;
      parts[1] = &m.up;
      parts[2] = &m.down;
      for (int i = 0; i < 3; ++i) {
        TANDEM_ASSIGN_OR_RETURN(
            TensorView t, store.Lookup(shm::ExpertWeightName(static_cast<int64_t>(l),
                                                             shm::kExpertWeightBases[i], e)));
        TANDEM_ASSIGN_OR_RETURN(*parts[i], ops::LinearWeight::Create(t, prefer));
      }
      s->experts_.emplace(Key(static_cast<int64_t>(l), e), std::move(m));
    }
  }
  return s;
}

int64_t ExpertServer::Handle(absl::Span<const uint8_t> request, absl::Span<uint8_t> reply) {
  auto req = wire::ParseRequest(request);
  if (!req.ok()) return wire::WriteErrorReply(0, req.status(), reply);
  const auto& h = req->header;
  if (h.hidden != hidden_) {
    return wire::WriteErrorReply(
        h.batch_id,
        absl::InvalidArgumentError(absl::StrCat("hidden size ", h.hidden, ", model has ", hidden_)),
        reply);
  }
  if (wire::ReplyBytes(h.total_rows, h.hidden) > static_cast<int64_t>(reply.size())) {
    return wire::WriteErrorReply(
        h.batch_id, absl::ResourceExhaustedError("reply does not fit in a ring slot"), reply);
  }
  for (const auto& j : req->jobs) {
    if (!experts_.contains(Key(h.layer, j.expert))) {
      return wire::WriteErrorReply(
          h.batch_id,
          absl::FailedPreconditionError(
              absl::StrCat("expert ", j.expert, " of layer ", h.layer, " is not on this cpu_worker")),
          reply);
    }
  }
  wire::ExpertReplyHeader rh;
  rh.batch_id = h.batch_id;
  rh.total_rows = h.total_rows;
  rh.hidden = h.hidden;
  std::memcpy(reply.data(), &rh, sizeof(rh));
  float* out = reinterpret_cast<float*>(reply.data() + wire::ReplyRowsOffset(0));
  const float* in = req->rows;
  calls_.clear();
  for (const auto& j : req->jobs) {
    if (j.rows > 0) calls_.push_back({&experts_.at(Key(h.layer, j.expert)), in, j.rows, out});
    in += j.rows * h.hidden;
    out += j.rows * h.hidden;
  }
  ops::RunMlps(calls_.data(), static_cast<int64_t>(calls_.size()), scratch_);
  return wire::ReplyBytes(h.total_rows, h.hidden);
}

absl::Status ExpertServer::Serve(shm::SlotRing& requests, shm::SlotRing& replies,
                                 const std::atomic<bool>& stop, absl::Duration poll) {
  while (!stop.load(std::memory_order_relaxed)) {
    absl::StatusOr<shm::RingMessage> msg = requests.Wait(poll);
    if (absl::IsDeadlineExceeded(msg.status())) continue;
    if (!msg.ok()) return msg.status();
    if (on_first_request_) std::exchange(on_first_request_, nullptr)();
    TANDEM_ASSIGN_OR_RETURN(absl::Span<uint8_t> slot,
                            replies.Reserve(replies.slot_bytes(), absl::Seconds(30)));
    const int64_t n = Handle(msg->data, slot);
    TANDEM_RETURN_IF_ERROR(replies.Commit(n));
    TANDEM_RETURN_IF_ERROR(requests.Release());
  }
  return absl::OkStatus();
}

}  // namespace tandem
