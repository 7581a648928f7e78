// Messages between a gpu_worker and a cpu_worker computing its CPU experts,
// laid out directly in shared-memory ring slots (no serialisation copies).
//
// Request:  ExpertRequestHeader, num_jobs x ExpertJobEntry, padding to 64,
//           rows f32 [total_rows, hidden] (jobs' rows back to back).
// Reply:    ExpertReplyHeader, error text (msg_bytes), padding to 64,
//           rows f32 [total_rows, hidden] (only when status_code == 0).
// A batch too large for one slot is sent as several requests; each request
// gets exactly one reply, in order.
#ifndef TANDEM_COMMON_EXPERT_WIRE_H_
#define TANDEM_COMMON_EXPERT_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::wire {

inline constexpr uint32_t kExpertRequestMagic = 0x51525845;  // "EXRQ"
inline constexpr uint32_t kExpertReplyMagic = 0x50525845;    // "EXRP"

struct ExpertRequestHeader {
  uint32_t magic = kExpertRequestMagic;
  int32_t layer = 0;
  int32_t num_jobs = 0;
  int32_t reserved = 0;
  int64_t hidden = 0;
  int64_t total_rows = 0;
  uint64_t batch_id = 0;
};

struct ExpertJobEntry {
  int32_t expert = 0;
  int32_t reserved = 0;
  int64_t rows = 0;
};

struct ExpertReplyHeader {
  uint32_t magic = kExpertReplyMagic;
  int32_t status_code = 0;  // absl::StatusCode
  uint64_t batch_id = 0;
  int64_t total_rows = 0;
  int64_t hidden = 0;
  int64_t msg_bytes = 0;
};

// Bytes of a request with `num_jobs` jobs and `total_rows` rows, and the
// offset of its row data.
int64_t RequestRowsOffset(int64_t num_jobs);
int64_t RequestBytes(int64_t num_jobs, int64_t total_rows, int64_t hidden);
int64_t ReplyRowsOffset(int64_t msg_bytes);
int64_t ReplyBytes(int64_t total_rows, int64_t hidden);

// A request read from a slot, checked against the slot's size: every count
// non-negative, rows of the jobs summing to total_rows, data inside the slot.
struct ExpertRequestView {
  ExpertRequestHeader header;
  std::vector<ExpertJobEntry> jobs;
  const float* rows = nullptr;  // [total_rows, hidden], inside the slot
};
absl::StatusOr<ExpertRequestView> ParseRequest(absl::Span<const uint8_t> msg);

struct ExpertReplyView {
  ExpertReplyHeader header;
  std::string error;
  const float* rows = nullptr;
};
absl::StatusOr<ExpertReplyView> ParseReply(absl::Span<const uint8_t> msg);

// Writes an error reply into `slot`; returns its size.
int64_t WriteErrorReply(uint64_t batch_id, const absl::Status& status, absl::Span<uint8_t> slot);

}  // namespace tandem::wire

#endif  // TANDEM_COMMON_EXPERT_WIRE_H_
