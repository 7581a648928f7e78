#include "common/expert_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::wire {
namespace {

int64_t Align64(int64_t n) { return (n + 63) / 64 * 64; }

}  // namespace

int64_t RequestRowsOffset(int64_t num_jobs) {
  return Align64(static_cast<int64_t>(sizeof(ExpertRequestHeader)) +
                 num_jobs * static_cast<int64_t>(sizeof(ExpertJobEntry)));
}

int64_t RequestBytes(int64_t num_jobs, int64_t total_rows, int64_t hidden) {
  return RequestRowsOffset(num_jobs) + total_rows * hidden * 4;
}

int64_t ReplyRowsOffset(int64_t msg_bytes) {
  return Align64(static_cast<int64_t>(sizeof(ExpertReplyHeader)) + msg_bytes);
}

int64_t ReplyBytes(int64_t total_rows, int64_t hidden) {
  return ReplyRowsOffset(0) + total_rows * hidden * 4;
}

absl::StatusOr<ExpertRequestView> ParseRequest(absl::Span<const uint8_t> msg) {
  ExpertRequestView v;
  if (msg.size() < sizeof(ExpertRequestHeader)) {
    return absl::InvalidArgumentError("expert request shorter than its header");
  }
  std::memcpy(&v.header, msg.data(), sizeof(v.header));
  const auto& h = v.header;
  if (h.magic != kExpertRequestMagic) return absl::InvalidArgumentError("not an expert request");
  if (h.num_jobs < 0 || h.num_jobs > (1 << 20) || h.hidden <= 0 || h.hidden > (1 << 20) ||
      h.total_rows < 0 || h.total_rows > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("expert request with bad counts: jobs ",
                                                   h.num_jobs, " hidden ", h.hidden, " rows ",
                                                   h.total_rows));
  }
  const int64_t need = RequestBytes(h.num_jobs, h.total_rows, h.hidden);
  if (need > static_cast<int64_t>(msg.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert request of ", need, " bytes in a ", msg.size(), "-byte message"));
  }
  v.jobs.resize(static_cast<size_t>(h.num_jobs));
  std::memcpy(v.jobs.data(), msg.data() + sizeof(ExpertRequestHeader),
              v.jobs.size() * sizeof(ExpertJobEntry));
  int64_t rows = 0;
  for (const auto& j : v.jobs) {
    if (j.rows < 0 || j.expert < 0) return absl::InvalidArgumentError("negative job in request");
    rows += j.rows;
  }
  if (rows != h.total_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert request jobs hold ", rows, " rows, header says ", h.total_rows));
  }
  v.rows = reinterpret_cast<const float*>(msg.data() + RequestRowsOffset(h.num_jobs));
  return v;
}

absl::StatusOr<ExpertReplyView> ParseReply(absl::Span<const uint8_t> msg) {
  ExpertReplyView v;
  if (msg.size() < sizeof(ExpertReplyHeader)) {
    return absl::InvalidArgumentError("expert reply shorter than its header");
  }
  std::memcpy(&v.header, msg.data(), sizeof(v.header));
  const auto& h = v.header;
  if (h.magic != kExpertReplyMagic) return absl::InvalidArgumentError("not an expert reply");
  if (h.msg_bytes < 0 || h.msg_bytes > 4096 || h.total_rows < 0 || h.hidden < 0) {
    return absl::InvalidArgumentError("expert reply with bad counts");
  }
  if (static_cast<int64_t>(sizeof(ExpertReplyHeader)) + h.msg_bytes >
      static_cast<int64_t>(msg.size())) {
    return absl::InvalidArgumentError("expert reply truncated");
  }
  v.error.assign(reinterpret_cast<const char*>(msg.data() + sizeof(ExpertReplyHeader)),
                 static_cast<size_t>(h.msg_bytes));
  if (h.status_code == 0) {
    if (ReplyRowsOffset(h.msg_bytes) + h.total_rows * h.hidden * 4 >
        static_cast<int64_t>(msg.size())) {
      return absl::InvalidArgumentError("expert reply rows truncated");
    }
    v.rows = reinterpret_cast<const float*>(msg.data() + ReplyRowsOffset(h.msg_bytes));
  }
  return v;
}

int64_t WriteErrorReply(uint64_t batch_id, const absl::Status& status, absl::Span<uint8_t> slot) {
  ExpertReplyHeader h;
  h.batch_id = batch_id;
  h.status_code = static_cast<int32_t>(status.code());
  std::string text(status.message());
  const int64_t room = static_cast<int64_t>(slot.size()) -
                       static_cast<int64_t>(sizeof(ExpertReplyHeader));
  if (static_cast<int64_t>(text.size()) > std::min<int64_t>(room, 4096)) {
    text.resize(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(room, 4096))));
  }
  h.msg_bytes = static_cast<int64_t>(text.size());
  std::memcpy(slot.data(), &h, sizeof(h));
  std::memcpy(slot.data() + sizeof(h), text.data(), text.size());
  return static_cast<int64_t>(sizeof(h) + text.size());
}

}  // namespace tandem::wire
