#include "common/shm/attention_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::wire {
namespace {

int64_t Align64(int64_t n) { return (n + 63) / 64 * 64; }

// Bounds that keep every size computation far from int64 overflow:
// tokens (2^30) x row width (2^20) x 4 bytes < 2^53.
constexpr int64_t kMaxCount = int64_t{1} << 20;
constexpr int64_t kMaxTokens = int64_t{1} << 30;
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxPos = int64_t{1} << 40;
constexpr int64_t kMaxErrorBytes = 4096;

}  // namespace

int64_t AttentionRowsOffset(int64_t num_frees, int64_t num_seqs) {
  return Align64(static_cast<int64_t>(sizeof(AttentionRequestHeader)) + num_frees * 8 +
                 num_seqs * static_cast<int64_t>(sizeof(AttentionSeqEntry)));
}

int64_t AttentionRequestBytes(int64_t num_frees, int64_t num_seqs, int64_t total_tokens,
                              int64_t q_dim, int64_t kv_dim) {
  return AttentionRowsOffset(num_frees, num_seqs) + total_tokens * (q_dim + 2 * kv_dim) * 4;
}

int64_t AttentionReplyRowsOffset(int64_t msg_bytes) {
  return Align64(static_cast<int64_t>(sizeof(AttentionReplyHeader)) + msg_bytes);
}

int64_t AttentionReplyBytes(int64_t total_tokens, int64_t q_dim) {
  return AttentionReplyRowsOffset(0) + total_tokens * q_dim * 4;
}

absl::StatusOr<AttentionRequestView> ParseAttentionRequest(absl::Span<const uint8_t> msg) {
  AttentionRequestView v;
  if (msg.size() < sizeof(AttentionRequestHeader)) {
    return absl::InvalidArgumentError("attention request shorter than its header");
  }
  std::memcpy(&v.header, msg.data(), sizeof(v.header));
  const AttentionRequestHeader& h = v.header;
  if (h.magic != kAttentionRequestMagic) {
    return absl::InvalidArgumentError("not an attention request");
  }
  if (h.op != static_cast<int32_t>(AttentionOp::kConfigure) &&
      h.op != static_cast<int32_t>(AttentionOp::kAttend)) {
    return absl::InvalidArgumentError(absl::StrCat("attention request with unknown op ", h.op));
  }
  if (h.num_seqs < 0 || h.num_seqs > kMaxCount || h.num_frees < 0 || h.num_frees > kMaxCount ||
      h.heads <= 0 || h.kv_heads <= 0 || h.head_dim <= 0 || h.heads % h.kv_heads != 0 ||
      int64_t{h.heads} * h.head_dim > kMaxDim || h.total_tokens < 0 ||
      h.total_tokens > kMaxTokens || h.layer < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention request with bad counts: seqs ", h.num_seqs, " frees ", h.num_frees,
        " heads ", h.heads, "/", h.kv_heads, " head_dim ", h.head_dim, " tokens ",
        h.total_tokens, " layer ", h.layer));
  }
  const int64_t qd = int64_t{h.heads} * h.head_dim;
  const int64_t kvd = int64_t{h.kv_heads} * h.head_dim;
  const int64_t need = AttentionRequestBytes(h.num_frees, h.num_seqs, h.total_tokens, qd, kvd);
  if (need > static_cast<int64_t>(msg.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention request of ", need, " bytes in a ", msg.size(), "-byte message"));
  }
  const uint8_t* p = msg.data() + sizeof(AttentionRequestHeader);
  v.frees.resize(static_cast<size_t>(h.num_frees));
  if (!v.frees.empty()) std::memcpy(v.frees.data(), p, v.frees.size() * 8);
  p += v.frees.size() * 8;
  v.seqs.resize(static_cast<size_t>(h.num_seqs));
  if (!v.seqs.empty()) std::memcpy(v.seqs.data(), p, v.seqs.size() * sizeof(AttentionSeqEntry));
  int64_t tokens = 0;
  for (const AttentionSeqEntry& e : v.seqs) {
    if (e.tokens <= 0 || e.tokens > kMaxTokens || e.start_pos < 0 || e.start_pos > kMaxPos) {
      return absl::InvalidArgumentError(absl::StrCat("attention request entry for sequence ",
                                                     e.seq_id, " with start ", e.start_pos,
                                                     " and ", e.tokens, " tokens"));
    }
    tokens += e.tokens;
  }
  if (tokens != h.total_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("attention request entries hold ", tokens,
                                                   " tokens, header says ", h.total_tokens));
  }
  if (h.op == static_cast<int32_t>(AttentionOp::kConfigure) &&
      (h.num_layers <= 0 || h.num_layers > kMaxCount || h.block_size <= 0 ||
       h.block_size > kMaxCount || h.capacity_tokens <= 0 || h.capacity_tokens > kMaxTokens ||
       !(h.scale > 0.0f) || h.num_seqs != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention configure request with bad shape: layers ", h.num_layers, " block ",
        h.block_size, " capacity ", h.capacity_tokens, " scale ", h.scale));
  }
  const uint8_t* rows = msg.data() + AttentionRowsOffset(h.num_frees, h.num_seqs);
  v.q = reinterpret_cast<const float*>(rows);
  v.k = v.q + h.total_tokens * qd;
  v.v = v.k + h.total_tokens * kvd;
  return v;
}

absl::StatusOr<AttentionReplyView> ParseAttentionReply(absl::Span<const uint8_t> msg) {
  AttentionReplyView v;
  if (msg.size() < sizeof(AttentionReplyHeader)) {
    return absl::InvalidArgumentError("attention reply shorter than its header");
  }
  std::memcpy(&v.header, msg.data(), sizeof(v.header));
  const AttentionReplyHeader& h = v.header;
  if (h.magic != kAttentionReplyMagic) return absl::InvalidArgumentError("not an attention reply");
  if (h.msg_bytes < 0 || h.msg_bytes > kMaxErrorBytes || h.total_tokens < 0 ||
      h.total_tokens > kMaxTokens || h.q_dim < 0 || h.q_dim > kMaxDim) {
    return absl::InvalidArgumentError("attention reply with bad counts");
  }
  if (static_cast<int64_t>(sizeof(AttentionReplyHeader)) + h.msg_bytes >
      static_cast<int64_t>(msg.size())) {
    return absl::InvalidArgumentError("attention reply truncated");
  }
  v.error.assign(reinterpret_cast<const char*>(msg.data() + sizeof(AttentionReplyHeader)),
                 static_cast<size_t>(h.msg_bytes));
  if (h.status_code == 0) {
    if (AttentionReplyRowsOffset(h.msg_bytes) + h.total_tokens * h.q_dim * 4 >
        static_cast<int64_t>(msg.size())) {
      return absl::InvalidArgumentError("attention reply rows truncated");
    }
    v.out = reinterpret_cast<const float*>(msg.data() + AttentionReplyRowsOffset(h.msg_bytes));
  }
  return v;
}

int64_t WriteAttentionErrorReply(uint64_t batch_id, const absl::Status& status,
                                 absl::Span<uint8_t> slot) {
  AttentionReplyHeader h;
  h.batch_id = batch_id;
  // An OK status here is a caller's bug; never let it pass as a success.
  h.status_code = status.ok() ? static_cast<int32_t>(absl::StatusCode::kInternal)
                              : static_cast<int32_t>(status.code());
  if (slot.size() < sizeof(h)) return 0;
  std::string text(status.message());
  const int64_t room = static_cast<int64_t>(slot.size()) - static_cast<int64_t>(sizeof(h));
  text.resize(static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(text.size()), std::min(room, kMaxErrorBytes))));
  h.msg_bytes = static_cast<int64_t>(text.size());
  std::memcpy(slot.data(), &h, sizeof(h));
  std::memcpy(slot.data() + sizeof(h), text.data(), text.size());
  return static_cast<int64_t>(sizeof(h) + text.size());
}

}  // namespace tandem::wire
