#include "gpu_worker/engine/shm_attention_offload.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/shm/attention_wire.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

// Frees carried by one request; more go in frees-only requests first. A
// slot always has room for this many frees plus one token, so packing
// always makes progress.
constexpr int64_t kMaxFreesPerMessage = 4096;

}  // namespace

int64_t AttentionSlotBytesFor(const CpuAttentionShape& s, int64_t tokens) {
  const int64_t qd = s.heads * s.kv.head_dim, kvd = s.kv.kv_heads * s.kv.head_dim;
  return std::max<int64_t>(
      1 << 20, wire::AttentionRequestBytes(kMaxFreesPerMessage, 256, std::max<int64_t>(tokens, 1),
                                           qd, kvd));
}

absl::StatusOr<std::unique_ptr<ShmAttentionOffload>> ShmAttentionOffload::Create(
    const ShmAttentionOptions& options) {
  const CpuAttentionShape& s = options.shape;
  if (s.heads <= 0 || s.kv.kv_heads <= 0 || s.kv.head_dim <= 0 || s.kv.num_layers <= 0 ||
      s.kv.block_size <= 0 || s.kv.capacity_tokens <= 0 || !(s.scale > 0.0f)) {
    return absl::InvalidArgumentError("attention offload: the cache shape must be positive");
  }
  if (s.heads > (1 << 20) || s.kv.head_dim > (1 << 20) || s.heads * s.kv.head_dim > (1 << 20)) {
    return absl::InvalidArgumentError("attention offload: rows too wide");
  }
  auto o = std::unique_ptr<ShmAttentionOffload>(new ShmAttentionOffload());
  o->options_ = options;
  o->q_dim_ = s.heads * s.kv.head_dim;
  o->kv_dim_ = s.kv.kv_heads * s.kv.head_dim;
  if (options.slot_count <= 0 ||
      options.slot_bytes <
          wire::AttentionRequestBytes(kMaxFreesPerMessage, 1, 1, o->q_dim_, o->kv_dim_)) {
    return absl::InvalidArgumentError(
        "attention offload: slots too small for a request of one token");
  }
  shm::RingOptions ro;
  ro.slot_count = options.slot_count;
  ro.slot_bytes = options.slot_bytes;
  TANDEM_ASSIGN_OR_RETURN(o->requests_,
                          shm::SlotRing::Create(o->request_ring(), shm::RingRole::kProducer, ro));
  TANDEM_ASSIGN_OR_RETURN(o->replies_,
                          shm::SlotRing::Create(o->reply_ring(), shm::RingRole::kConsumer, ro));
  return o;
}

absl::Status ShmAttentionOffload::Gone(const absl::Status& s) {
  if (s.ok()) return s;
  if (absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s)) {
    return absl::UnavailableError(absl::StrCat("cpu_worker not answering: ", s.message()));
  }
  return s;
}

absl::Status ShmAttentionOffload::WaitForWorker(absl::Duration timeout) {
  if (!attached_) {
    TANDEM_RETURN_IF_ERROR(requests_->WaitForPeer(timeout));
    TANDEM_RETURN_IF_ERROR(replies_->WaitForPeer(timeout));
    // Both sides hold the mappings now: drop the names so a crash leaves
    // nothing behind in /dev/shm.
    TANDEM_RETURN_IF_ERROR(requests_->UnlinkName());
    TANDEM_RETURN_IF_ERROR(replies_->UnlinkName());
    attached_ = true;
  }
  if (!configured_) {
    TANDEM_RETURN_IF_ERROR(Configure());
    configured_ = true;
  }
  return absl::OkStatus();
}

absl::Status ShmAttentionOffload::Configure() {
  const CpuAttentionShape& s = options_.shape;
  wire::AttentionRequestHeader h;
  h.op = static_cast<int32_t>(wire::AttentionOp::kConfigure);
  h.heads = static_cast<int32_t>(s.heads);
  h.kv_heads = static_cast<int32_t>(s.kv.kv_heads);
  h.head_dim = static_cast<int32_t>(s.kv.head_dim);
  h.batch_id = next_batch_++;
  h.num_layers = s.kv.num_layers;
  h.block_size = s.kv.block_size;
  h.capacity_tokens = s.kv.capacity_tokens;
  h.scale = s.scale;
  const int64_t bytes = wire::AttentionRowsOffset(0, 0);
  absl::StatusOr<absl::Span<uint8_t>> slot = requests_->Reserve(bytes, options_.timeout);
  if (!slot.ok()) return Gone(slot.status());
  std::memcpy(slot->data(), &h, sizeof(h));
  TANDEM_RETURN_IF_ERROR(Gone(requests_->Commit(bytes)));
  absl::StatusOr<shm::RingMessage> msg = replies_->Wait(options_.timeout);
  if (!msg.ok()) return Gone(msg.status());
  absl::StatusOr<wire::AttentionReplyView> r = wire::ParseAttentionReply(msg->data);
  absl::Status st = r.status();
  if (st.ok() && r->header.batch_id != h.batch_id) {
    st = absl::InternalError("attention configure reply for another request");
  }
  if (st.ok() && r->header.status_code != 0) {
    st = absl::Status(static_cast<absl::StatusCode>(r->header.status_code),
                      absl::StrCat("cpu_worker refused the CPU KV cache: ", r->error));
  }
  TANDEM_RETURN_IF_ERROR(Gone(replies_->Release()));
  return st;
}

void ShmAttentionOffload::Plan(const std::vector<AttentionJob>& jobs) {
  const int64_t slot = options_.slot_bytes;
  const int64_t req_row = (q_dim_ + 2 * kv_dim_) * 4;
  const int64_t rep_rows = (slot - wire::AttentionReplyRowsOffset(0)) / (q_dim_ * 4);
  plan_.clear();
  next_send_ = 0;
  Message cur;
  cur.batch_id = next_batch_++;
  auto flush = [&] {
    plan_.push_back(std::move(cur));
    cur = Message();
    cur.batch_id = next_batch_++;
  };
  for (int64_t id : pending_frees_) {
    if (static_cast<int64_t>(cur.frees.size()) == kMaxFreesPerMessage) flush();
    cur.frees.push_back(id);
  }
  pending_frees_.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    int64_t row = 0;
    while (row < jobs[j].tokens) {
      const int64_t pieces = static_cast<int64_t>(cur.pieces.size()) + 1;
      const int64_t frees = static_cast<int64_t>(cur.frees.size());
      const int64_t req_room = (slot - wire::AttentionRowsOffset(frees, pieces)) / req_row;
      const int64_t take =
          std::min(jobs[j].tokens - row, std::min(req_room, rep_rows) - cur.tokens);
      if (take <= 0) {
        flush();
        continue;
      }
      cur.pieces.push_back({j, row, take});
      cur.tokens += take;
      row += take;
    }
  }
  if (!cur.frees.empty() || !cur.pieces.empty()) plan_.push_back(std::move(cur));
}

absl::Status ShmAttentionOffload::Submit(int64_t layer, const std::vector<AttentionJob>& jobs) {
  if (!configured_) {
    return absl::FailedPreconditionError("attention offload: no cpu_worker attached yet");
  }
  if (!in_flight_.empty() || next_send_ < plan_.size()) {
    return absl::FailedPreconditionError("attention offload: Submit before the last Collect");
  }
  for (const AttentionJob& j : jobs) {
    if (j.tokens <= 0 || j.start_pos < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attention offload: empty job for sequence ", j.seq_id));
    }
  }
  layer_ = layer;
  Plan(jobs);
  while (next_send_ < plan_.size() &&
         static_cast<int64_t>(in_flight_.size()) < options_.slot_count) {
    TANDEM_RETURN_IF_ERROR(Send(layer, plan_[next_send_], jobs));
    in_flight_.push_back(&plan_[next_send_]);
    ++next_send_;
  }
  return absl::OkStatus();
}

absl::Status ShmAttentionOffload::Send(int64_t layer, const Message& m,
                                       const std::vector<AttentionJob>& jobs) {
  const int64_t nf = static_cast<int64_t>(m.frees.size());
  const int64_t np = static_cast<int64_t>(m.pieces.size());
  const int64_t bytes = wire::AttentionRequestBytes(nf, np, m.tokens, q_dim_, kv_dim_);
  absl::StatusOr<absl::Span<uint8_t>> slot = requests_->Reserve(bytes, options_.timeout);
  if (!slot.ok()) {
    // The ring is unusable: forget the rest of this layer.
    in_flight_.clear();
    next_send_ = plan_.size();
    return Gone(slot.status());
  }
  const CpuAttentionShape& s = options_.shape;
  wire::AttentionRequestHeader h;
  h.op = static_cast<int32_t>(wire::AttentionOp::kAttend);
  h.layer = static_cast<int32_t>(layer);
  h.num_seqs = static_cast<int32_t>(np);
  h.num_frees = static_cast<int32_t>(nf);
  h.heads = static_cast<int32_t>(s.heads);
  h.kv_heads = static_cast<int32_t>(s.kv.kv_heads);
  h.head_dim = static_cast<int32_t>(s.kv.head_dim);
  h.total_tokens = m.tokens;
  h.batch_id = m.batch_id;
  uint8_t* p = slot->data();
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  if (nf > 0) std::memcpy(p, m.frees.data(), static_cast<size_t>(nf) * 8);
  p += nf * 8;
  for (const Piece& piece : m.pieces) {
    const AttentionJob& j = jobs[piece.job];
    wire::AttentionSeqEntry e{j.seq_id, j.start_pos + piece.row, piece.rows};
    std::memcpy(p, &e, sizeof(e));
    p += sizeof(e);
  }
  float* q = reinterpret_cast<float*>(slot->data() + wire::AttentionRowsOffset(nf, np));
  float* k = q + m.tokens * q_dim_;
  float* v = k + m.tokens * kv_dim_;
  for (const Piece& piece : m.pieces) {
    const AttentionJob& j = jobs[piece.job];
    std::memcpy(q, j.q + piece.row * q_dim_, static_cast<size_t>(piece.rows * q_dim_) * 4);
    std::memcpy(k, j.k + piece.row * kv_dim_, static_cast<size_t>(piece.rows * kv_dim_) * 4);
    std::memcpy(v, j.v + piece.row * kv_dim_, static_cast<size_t>(piece.rows * kv_dim_) * 4);
    q += piece.rows * q_dim_;
    k += piece.rows * kv_dim_;
    v += piece.rows * kv_dim_;
  }
  return Gone(requests_->Commit(bytes));
}

absl::Status ShmAttentionOffload::ReceiveOne(const std::vector<AttentionJob>& jobs) {
  const Message* m = in_flight_.front();
  absl::StatusOr<shm::RingMessage> msg = replies_->Wait(options_.timeout);
  if (!msg.ok()) return Gone(msg.status());
  absl::StatusOr<wire::AttentionReplyView> r = wire::ParseAttentionReply(msg->data);
  absl::Status s = r.status();
  if (s.ok() && r->header.batch_id != m->batch_id) {
    s = absl::InternalError(absl::StrCat("attention reply for request ", r->header.batch_id,
                                         ", expected ", m->batch_id));
  }
  if (s.ok() && r->header.status_code != 0) {
    s = absl::Status(static_cast<absl::StatusCode>(r->header.status_code),
                     absl::StrCat("cpu_worker: ", r->error));
  }
  if (s.ok() && (r->header.total_tokens != m->tokens || r->header.q_dim != q_dim_)) {
    s = absl::InternalError("attention reply of the wrong size");
  }
  if (s.ok()) {
    const float* src = r->out;
    for (const Piece& p : m->pieces) {
      std::memcpy(jobs[p.job].out + p.row * q_dim_, src, static_cast<size_t>(p.rows * q_dim_) * 4);
      src += p.rows * q_dim_;
    }
  }
  in_flight_.pop_front();
  TANDEM_RETURN_IF_ERROR(Gone(replies_->Release()));
  return s;
}

absl::Status ShmAttentionOffload::Collect(int64_t layer, const std::vector<AttentionJob>& jobs) {
  if (layer != layer_) return absl::FailedPreconditionError("Collect for another layer");
  absl::Status first_error;
  while (!in_flight_.empty()) {
    absl::Status s = ReceiveOne(jobs);
    if (!s.ok()) {
      if (absl::IsUnavailable(s)) {  // the rings are unusable now
        in_flight_.clear();
        next_send_ = plan_.size();
        return s;
      }
      if (first_error.ok()) first_error = s;
    }
    if (next_send_ < plan_.size()) {
      TANDEM_RETURN_IF_ERROR(Send(layer, plan_[next_send_], jobs));
      in_flight_.push_back(&plan_[next_send_]);
      ++next_send_;
    }
  }
  return first_error;
}

}  // namespace tandem
