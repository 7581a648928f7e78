// Messages between a gpu_worker and a cpu_worker computing CPU attention
// (Neo) over the cpu_worker's own KV cache, laid out directly in the slots
// of the attention ring pair (<prefix>-attn-req, <prefix>-attn-rep), so
// neither side serialises or copies beyond the one copy into the slot.
//
// Request:  AttentionRequestHeader,
//           num_frees x int64 seq_id         (sequences to forget first),
//           num_seqs x AttentionSeqEntry     (seq_id, start_pos, tokens),
//           padding to 64,
//           q f32 [total_tokens, heads * head_dim],
//           k f32 [total_tokens, kv_heads * head_dim],
//           v f32 [total_tokens, kv_heads * head_dim]
//           (each block holds the sequences' rows back to back, in entry order).
// Reply:    AttentionReplyHeader, error text (msg_bytes), padding to 64,
//           out f32 [total_tokens, heads * head_dim] (only when status_code == 0).
//
// op kConfigure (the first request of a session) carries the cache shape
// and no rows; op kAttend carries one layer's work. Each request gets exactly
// one reply, in order; the cpu_worker applies requests in order, so one
// sequence's chunk may be split across consecutive requests of a layer.
#ifndef TANDEM_COMMON_SHM_ATTENTION_WIRE_H_
#define TANDEM_COMMON_SHM_ATTENTION_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::wire {

inline constexpr uint32_t kAttentionRequestMagic = 0x51525441;  // "ATRQ"
inline constexpr uint32_t kAttentionReplyMagic = 0x50525441;    // "ATRP"

enum class AttentionOp : int32_t {
  kConfigure = 1,  // allocate the cache: num_layers, block_size, capacity_tokens, scale
  kAttend = 2,     // frees, then append k/v and attend for each entry, in order
};

struct AttentionRequestHeader {
  uint32_t magic = kAttentionRequestMagic;
  int32_t op = 0;  // AttentionOp
  int32_t layer = 0;
  int32_t num_seqs = 0;
  int32_t num_frees = 0;
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int64_t total_tokens = 0;
  uint64_t batch_id = 0;
  // kConfigure only.
  int64_t num_layers = 0;
  int64_t block_size = 0;
  int64_t capacity_tokens = 0;
  float scale = 0.0f;
  int32_t reserved = 0;
};

struct AttentionSeqEntry {
  int64_t seq_id = 0;
  int64_t start_pos = 0;
  int64_t tokens = 0;
};

struct AttentionReplyHeader {
  uint32_t magic = kAttentionReplyMagic;
  int32_t status_code = 0;  // absl::StatusCode
  uint64_t batch_id = 0;
  int64_t total_tokens = 0;
  int64_t q_dim = 0;
  int64_t msg_bytes = 0;
};

// Offset of the q rows, and the size of a whole request.
int64_t AttentionRowsOffset(int64_t num_frees, int64_t num_seqs);
int64_t AttentionRequestBytes(int64_t num_frees, int64_t num_seqs, int64_t total_tokens,
                              int64_t q_dim, int64_t kv_dim);
int64_t AttentionReplyRowsOffset(int64_t msg_bytes);
int64_t AttentionReplyBytes(int64_t total_tokens, int64_t q_dim);

// A request read from a slot, checked against the slot's size: known op and
// magic, counts and dimensions in range, every entry with tokens > 0 and
// start_pos >= 0, entries' tokens summing to total_tokens, rows inside the slot.
struct AttentionRequestView {
  AttentionRequestHeader header;
  std::vector<int64_t> frees;
  std::vector<AttentionSeqEntry> seqs;
  const float* q = nullptr;  // [total_tokens, heads * head_dim], inside the slot
  const float* k = nullptr;  // [total_tokens, kv_heads * head_dim]
  const float* v = nullptr;  // [total_tokens, kv_heads * head_dim]
};
absl::StatusOr<AttentionRequestView> ParseAttentionRequest(absl::Span<const uint8_t> msg);

struct AttentionReplyView {
  AttentionReplyHeader header;
  std::string error;
  const float* out = nullptr;  // [total_tokens, q_dim] when status_code == 0
};
absl::StatusOr<AttentionReplyView> ParseAttentionReply(absl::Span<const uint8_t> msg);

// Writes an error reply (text cut to fit) into `slot`; returns its size.
int64_t WriteAttentionErrorReply(uint64_t batch_id, const absl::Status& status,
                                 absl::Span<uint8_t> slot);

}  // namespace tandem::wire

#endif  // TANDEM_COMMON_SHM_ATTENTION_WIRE_H_
