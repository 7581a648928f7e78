#include "gpu_worker/engine/shm_expert_offload.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/expert_wire.h"
#include "common/status_macros.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<ShmExpertOffload>> ShmExpertOffload::Create(
    const ShmOffloadOptions& options, std::vector<std::vector<int32_t>> remote) {
  if (options.hidden <= 0 || options.slot_count <= 0 ||
      options.slot_bytes < wire::RequestBytes(1, 1, options.hidden)) {
    return absl::InvalidArgumentError("expert offload: slots too small for one row");
  }
  auto o = std::unique_ptr<ShmExpertOffload>(new ShmExpertOffload());
  o->options_ = options;
  for (const auto& layer : remote) {
    std::vector<bool> mask;
    for (int32_t e : layer) {
      if (e < 0) return absl::InvalidArgumentError("negative expert id in placement");
      if (static_cast<size_t>(e) >= mask.size()) mask.resize(static_cast<size_t>(e) + 1, false);
      mask[static_cast<size_t>(e)] = true;
    }
    o->remote_.push_back(std::move(mask));
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

absl::Status ShmExpertOffload::WaitForWorker(absl::Duration timeout) {
  TANDEM_RETURN_IF_ERROR(requests_->WaitForPeer(timeout));
  TANDEM_RETURN_IF_ERROR(replies_->WaitForPeer(timeout));
  // Both sides hold the mappings now: drop the names so a crash leaves
  // nothing behind in /dev/shm.
  TANDEM_RETURN_IF_ERROR(requests_->UnlinkName());
  return replies_->UnlinkName();
}

bool ShmExpertOffload::IsRemote(int64_t layer, int64_t expert) const {
  if (layer < 0 || layer >= static_cast<int64_t>(remote_.size())) return false;
  const auto& m = remote_[static_cast<size_t>(layer)];
  return expert >= 0 && expert < static_cast<int64_t>(m.size()) && m[static_cast<size_t>(expert)];
}

absl::Status ShmExpertOffload::Gone(const absl::Status& s) {
  if (s.ok()) return s;
  if (absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s)) {
    return absl::UnavailableError(absl::StrCat("cpu_worker not answering: ", s.message()));
  }
  return s;
}

absl::Status ShmExpertOffload::Submit(int64_t layer, const std::vector<ExpertJob>& jobs) {
  if (!in_flight_.empty() || next_send_ < plan_.size()) {
    return absl::FailedPreconditionError("expert offload: Submit before the last Collect");
  }
  const int64_t hidden = options_.hidden;
  const int64_t row_bytes = hidden * 4;
  plan_.clear();
  next_send_ = 0;
  layer_ = layer;
  // Pack rows into messages no larger than a slot.
  Message cur{next_batch_++, {}};
  int64_t cur_rows = 0;
  auto fits = [&](int64_t pieces, int64_t rows) {
    return wire::RequestBytes(pieces, rows, hidden) <= options_.slot_bytes &&
           wire::ReplyBytes(rows, hidden) <= options_.slot_bytes;
  };
  for (size_t j = 0; j < jobs.size(); ++j) {
    int64_t row = 0;
    while (row < jobs[j].rows) {
      int64_t take = jobs[j].rows - row;
      const int64_t pieces = static_cast<int64_t>(cur.pieces.size()) + 1;
      while (take > 0 && !fits(pieces, cur_rows + take)) {
        // Largest count that fits: the rows' bytes are linear in count.
        const int64_t room = (options_.slot_bytes - wire::RequestRowsOffset(pieces)) / row_bytes -
                             cur_rows;
        take = std::min(take - 1, std::max<int64_t>(room, 0));
      }
      if (take == 0) {
        plan_.push_back(std::move(cur));
        cur = Message{next_batch_++, {}};
        cur_rows = 0;
        continue;
      }
      cur.pieces.push_back({j, row, take});
      cur_rows += take;
      row += take;
    }
  }
  if (!cur.pieces.empty()) plan_.push_back(std::move(cur));

  while (next_send_ < plan_.size() &&
         static_cast<int64_t>(in_flight_.size()) < options_.slot_count) {
    TANDEM_RETURN_IF_ERROR(Send(layer, plan_[next_send_], jobs));
    in_flight_.push_back(&plan_[next_send_]);
    ++next_send_;
  }
  return absl::OkStatus();
}

absl::Status ShmExpertOffload::Send(int64_t layer, const Message& m,
                                    const std::vector<ExpertJob>& jobs) {
  const int64_t hidden = options_.hidden;
  int64_t rows = 0;
  for (const Piece& p : m.pieces) rows += p.rows;
  const int64_t bytes = wire::RequestBytes(static_cast<int64_t>(m.pieces.size()), rows, hidden);
  absl::StatusOr<absl::Span<uint8_t>> slot = requests_->Reserve(bytes, options_.timeout);
  if (!slot.ok()) return Gone(slot.status());
  wire::ExpertRequestHeader h;
  h.layer = static_cast<int32_t>(layer);
  h.num_jobs = static_cast<int32_t>(m.pieces.size());
  h.hidden = hidden;
  h.total_rows = rows;
  h.batch_id = m.batch_id;
  std::memcpy(slot->data(), &h, sizeof(h));
  uint8_t* entries = slot->data() + sizeof(h);
  float* data = reinterpret_cast<float*>(slot->data() +
                                         wire::RequestRowsOffset(h.num_jobs));
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const Piece& p = m.pieces[i];
    wire::ExpertJobEntry e;
    e.expert = jobs[p.job].expert;
    e.rows = p.rows;
    std::memcpy(entries + i * sizeof(e), &e, sizeof(e));
    std::memcpy(data, jobs[p.job].input + p.row * hidden,
                static_cast<size_t>(p.rows * hidden) * 4);
    data += p.rows * hidden;
  }
  return Gone(requests_->Commit(bytes));
}

absl::Status ShmExpertOffload::ReceiveOne(const std::vector<ExpertJob>& jobs) {
  const Message* m = in_flight_.front();
  absl::StatusOr<shm::RingMessage> msg = replies_->Wait(options_.timeout);
  if (!msg.ok()) return Gone(msg.status());
  absl::StatusOr<wire::ExpertReplyView> r = wire::ParseReply(msg->data);
  absl::Status s = r.status();
  if (s.ok() && r->header.batch_id != m->batch_id) {
    s = absl::InternalError(absl::StrCat("expert reply for batch ", r->header.batch_id,
                                         ", expected ", m->batch_id));
  }
  if (s.ok() && r->header.status_code != 0) {
    s = absl::Status(static_cast<absl::StatusCode>(r->header.status_code),
                     absl::StrCat("cpu_worker: ", r->error));
  }
  if (s.ok()) {
    const float* src = r->rows;
    const int64_t hidden = options_.hidden;
    for (const Piece& p : m->pieces) {
      std::memcpy(jobs[p.job].output + p.row * hidden, src, static_cast<size_t>(p.rows * hidden) * 4);
      src += p.rows * hidden;
    }
  }
  in_flight_.pop_front();
  TANDEM_RETURN_IF_ERROR(Gone(replies_->Release()));
  return s;
}

absl::Status ShmExpertOffload::Collect(int64_t layer, const std::vector<ExpertJob>& jobs) {
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
