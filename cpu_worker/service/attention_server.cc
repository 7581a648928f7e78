#include "cpu_worker/service/attention_server.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shm/attention_wire.h"
#include "common/status_macros.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<AttentionServer>> AttentionServer::Create(
    const ModelConfig& config, int64_t max_kv_tokens) {
  TANDEM_RETURN_IF_ERROR(config.Validate());
  if (max_kv_tokens < 0) {
    return absl::InvalidArgumentError("attention server: the KV token limit must be >= 0");
  }
  auto s = std::unique_ptr<AttentionServer>(new AttentionServer());
  s->config_ = config;
  s->max_kv_tokens_ = max_kv_tokens;
  return s;
}

absl::Status AttentionServer::Configure(const wire::AttentionRequestHeader& h) {
  const ModelConfig& c = config_;
  if (h.num_layers != c.num_layers || h.heads != c.num_heads || h.kv_heads != c.num_kv_heads ||
      h.head_dim != c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention shape layers ", h.num_layers, " heads ", h.heads, "/", h.kv_heads,
        " head_dim ", h.head_dim, " does not match the model (", c.num_layers, ", ",
        c.num_heads, "/", c.num_kv_heads, ", ", c.head_dim, ")"));
  }
  if (max_kv_tokens_ > 0 && h.capacity_tokens > max_kv_tokens_) {
    return absl::ResourceExhaustedError(absl::StrCat("the gpu_worker asks for ",
                                                     h.capacity_tokens,
                                                     " CPU KV tokens; this cpu_worker holds at "
                                                     "most ",
                                                     max_kv_tokens_, " (--cpu-kv-tokens)"));
  }
  CpuAttentionShape shape;
  shape.kv.num_layers = h.num_layers;
  shape.kv.kv_heads = h.kv_heads;
  shape.kv.head_dim = h.head_dim;
  shape.kv.block_size = h.block_size;
  shape.kv.capacity_tokens = h.capacity_tokens;
  shape.heads = h.heads;
  shape.scale = h.scale;
  // A new session's shape replaces the old cache (its sequences are gone).
  attention_.reset();
  TANDEM_ASSIGN_OR_RETURN(attention_, CpuAttention::Create(shape));
  return absl::OkStatus();
}

int64_t AttentionServer::Handle(absl::Span<const uint8_t> request, absl::Span<uint8_t> reply) {
  absl::StatusOr<wire::AttentionRequestView> req = wire::ParseAttentionRequest(request);
  if (!req.ok()) return wire::WriteAttentionErrorReply(0, req.status(), reply);
  const wire::AttentionRequestHeader& h = req->header;
  const int64_t qd = int64_t{h.heads} * h.head_dim;
  const int64_t kvd = int64_t{h.kv_heads} * h.head_dim;
  if (wire::AttentionReplyBytes(h.total_tokens, qd) > static_cast<int64_t>(reply.size())) {
    return wire::WriteAttentionErrorReply(
        h.batch_id, absl::ResourceExhaustedError("attention reply does not fit in a ring slot"),
        reply);
  }
  wire::AttentionReplyHeader rh;
  rh.batch_id = h.batch_id;
  rh.total_tokens = h.total_tokens;
  rh.q_dim = qd;

  if (h.op == static_cast<int32_t>(wire::AttentionOp::kConfigure)) {
    absl::Status s = Configure(h);
    if (!s.ok()) return wire::WriteAttentionErrorReply(h.batch_id, s, reply);
    std::memcpy(reply.data(), &rh, sizeof(rh));
    return wire::AttentionReplyBytes(0, qd);
  }

  if (attention_ == nullptr) {
    return wire::WriteAttentionErrorReply(
        h.batch_id, absl::FailedPreconditionError("attention request before the cache shape"),
        reply);
  }
  const CpuAttentionShape& shape = attention_->shape();
  if (h.heads != shape.heads || h.kv_heads != shape.kv.kv_heads ||
      h.head_dim != shape.kv.head_dim) {
    return wire::WriteAttentionErrorReply(
        h.batch_id,
        absl::InvalidArgumentError(absl::StrCat("attention request for heads ", h.heads, "/",
                                                h.kv_heads, " head_dim ", h.head_dim,
                                                "; the cache was made for ", shape.heads, "/",
                                                shape.kv.kv_heads, " ", shape.kv.head_dim)),
        reply);
  }
  // Frees first: the gpu_worker may reuse a freed id in this very request.
  for (int64_t id : req->frees) attention_->Free(id);

  float* out = reinterpret_cast<float*>(reply.data() + wire::AttentionReplyRowsOffset(0));
  std::vector<CpuAttentionTask> tasks;
  tasks.reserve(req->seqs.size());
  int64_t at = 0;
  for (const wire::AttentionSeqEntry& e : req->seqs) {
    tasks.push_back({e.seq_id, e.start_pos, e.tokens, req->q + at * qd, req->k + at * kvd,
                     req->v + at * kvd, out + at * qd});
    at += e.tokens;
  }
  absl::Status s = attention_->Run(h.layer, tasks);
  if (!s.ok()) return wire::WriteAttentionErrorReply(h.batch_id, s, reply);
  std::memcpy(reply.data(), &rh, sizeof(rh));
  return wire::AttentionReplyBytes(h.total_tokens, qd);
}

absl::Status AttentionServer::Serve(shm::SlotRing& requests, shm::SlotRing& replies,
                                    const std::atomic<bool>& stop, absl::Duration poll) {
  while (!stop.load(std::memory_order_relaxed)) {
    absl::StatusOr<shm::RingMessage> msg = requests.Wait(poll);
    if (absl::IsDeadlineExceeded(msg.status())) continue;
    if (!msg.ok()) return msg.status();
    TANDEM_ASSIGN_OR_RETURN(absl::Span<uint8_t> slot,
                            replies.Reserve(replies.slot_bytes(), absl::Seconds(30)));
    const int64_t n = Handle(msg->data, slot);
    TANDEM_RETURN_IF_ERROR(replies.Commit(n));
    TANDEM_RETURN_IF_ERROR(requests.Release());
  }
  return absl::OkStatus();
}

}  // namespace tandem
