// Scheduler: step results, finishing requests, queue bookkeeping, metrics and
// the invariant check. Planning is in scheduler.cc.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/scheduler/scheduler.h"

namespace tandem::sched {

absl::StatusOr<std::vector<RequestUpdate>> Scheduler::OnStepResult(
    int64_t step_id, absl::Span<const SampledToken> results) {
  if (!in_flight_.has_value() || in_flight_->step_id != step_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step_id, " is not in flight"));
  }
  const std::vector<InFlightChunk>& chunks = in_flight_->chunks;
  absl::flat_hash_map<int64_t, size_t> index;
  for (size_t i = 0; i < chunks.size(); ++i) index[chunks[i].request_id] = i;

  // Validate everything before changing anything.
  std::vector<const SampledToken*> by_chunk(chunks.size(), nullptr);
  for (const SampledToken& res : results) {
    auto it = index.find(res.request_id);
    if (it == index.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", res.request_id, " is not in step ", step_id));
    }
    if (by_chunk[it->second] != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "two results for request ", res.request_id, " in step ", step_id));
    }
    by_chunk[it->second] = &res;
    if (!requests_.contains(res.request_id))
      continue;  // finished meanwhile: ignored
    const InFlightChunk& c = chunks[it->second];
    if (c.sample && !res.token.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", res.request_id, " was to sample but has no token"));
    }
    if (!c.sample && res.token.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", res.request_id,
                       " ran a partial prefill but reports a sampled token"));
    }
    if (res.token.has_value() && *res.token < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", res.request_id, ": negative token id ", *res.token));
    }
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].sample && by_chunk[i] == nullptr &&
        requests_.contains(chunks[i].request_id)) {
      return absl::InvalidArgumentError(absl::StrCat("no result for request ",
                                                     chunks[i].request_id,
                                                     " in step ", step_id));
    }
  }

  const InFlight done = std::move(*in_flight_);
  in_flight_.reset();
  std::vector<RequestUpdate> updates;
  for (size_t i = 0; i < done.chunks.size(); ++i) {
    const InFlightChunk& c = done.chunks[i];
    auto it = requests_.find(c.request_id);
    if (it == requests_.end()) continue;
    Request* r = it->second.get();
    // Only Schedule() preempts, and it cannot run while a step is in flight.
    TANDEM_CHECK(r->status() == RequestStatus::kRunning);
    r->AdvanceComputed(c.num_tokens);
    blocks_.CacheComputedBlocks(*r);
    if (!c.sample) continue;
    const int32_t token = *by_chunk[i]->token;
    r->AppendOutputToken(token);
    const std::optional<FinishReason> stop =
        r->CheckStop(token, config_.eos_token_ids, config_.max_model_len);
    updates.push_back({r->id(), token, stop});
    if (stop.has_value()) FinishInternal(r, *stop, "");
  }
  return updates;
}

absl::Status Scheduler::OnStepFailed(int64_t step_id) {
  if (!in_flight_.has_value() || in_flight_->step_id != step_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step_id, " is not in flight"));
  }
  // Nothing advanced: each request reruns the same tokens into the blocks it
  // already holds.
  in_flight_.reset();
  return absl::OkStatus();
}

absl::Status Scheduler::Finish(int64_t request_id, FinishReason reason,
                               std::string message) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return absl::NotFoundError(
        absl::StrCat("request ", request_id, " is unknown or finished"));
  }
  FinishInternal(it->second.get(), reason, std::move(message));
  return absl::OkStatus();
}

void Scheduler::FinishInternal(Request* r, FinishReason reason,
                               std::string message) {
  const int64_t id = r->id();
  if (r->status() == RequestStatus::kRunning) {
    RemoveFromRunning(r);
  } else {
    RemoveFromWaiting(r);
  }
  blocks_.Free(id);  // at once: the next Schedule() can hand them out
  r->MarkFinished(reason);
  pending_finished_.push_back({id, reason, std::move(message)});
  ++num_finished_;
  requests_.erase(id);  // deletes *r
}

void Scheduler::RemoveFromRunning(const Request* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  TANDEM_CHECK(it != running_.end());
  running_.erase(it);
}

void Scheduler::RemoveFromWaiting(const Request* r) {
  auto it = std::find(waiting_.begin(), waiting_.end(), r);
  TANDEM_CHECK(it != waiting_.end());
  waiting_.erase(it);
}

void Scheduler::InsertWaitingByArrival(Request* r) {
  auto it = std::upper_bound(
      waiting_.begin(), waiting_.end(), r->arrival_seq(),
      [](int64_t seq, const Request* w) { return seq < w->arrival_seq(); });
  waiting_.insert(it, r);
}

int64_t Scheduler::num_running(KvPool pool) const {
  return std::count_if(
      running_.begin(), running_.end(),
      [pool](const Request* r) { return r->kv_pool() == pool; });
}

const Request* Scheduler::GetRequest(int64_t request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::vector<int64_t> Scheduler::waiting_ids() const {
  std::vector<int64_t> ids;
  for (const Request* r : waiting_) ids.push_back(r->id());
  return ids;
}

std::vector<int64_t> Scheduler::running_ids() const {
  std::vector<int64_t> ids;
  for (const Request* r : running_) ids.push_back(r->id());
  return ids;
}

absl::Status Scheduler::CheckInvariants() const {
  absl::flat_hash_set<int64_t> seen;
  auto fail = [](const Request* r, const std::string& what) {
    return absl::InternalError(absl::StrCat("request ", r->id(), ": ", what));
  };
  int64_t prev = -1;
  for (const Request* r : waiting_) {
    if (!seen.insert(r->id()).second) return fail(r, "queued twice");
    if (GetRequest(r->id()) != r) return fail(r, "waiting but not registered");
    if (r->status() != RequestStatus::kWaiting &&
        r->status() != RequestStatus::kPreempted) {
      return fail(r, absl::StrCat("waiting with status ",
                                  RequestStatusName(r->status())));
    }
    if (r->arrival_seq() <= prev)
      return fail(r, "waiting queue out of arrival order");
    prev = r->arrival_seq();
    if (r->num_computed_tokens() != 0 || r->kv_pool().has_value() ||
        blocks_.HasTable(r->id())) {
      return fail(r, "waiting but holds KV");
    }
    if (r->status() == RequestStatus::kPreempted &&
        r->num_tokens() >= config_.max_model_len) {
      return fail(r, "preempted past the context limit");
    }
  }
  prev = -1;
  for (const Request* r : running_) {
    if (!seen.insert(r->id()).second)
      return fail(r, "both waiting and running, or twice");
    if (GetRequest(r->id()) != r) return fail(r, "running but not registered");
    if (r->status() != RequestStatus::kRunning)
      return fail(r, "running with wrong status");
    if (r->admit_seq() <= prev)
      return fail(r, "running list out of admission order");
    prev = r->admit_seq();
    if (!r->kv_pool().has_value() || blocks_.PoolOf(r->id()) != r->kv_pool()) {
      return fail(r, "KV pool disagrees with the block manager");
    }
    if (blocks_.CapacityOf(r->id()) < r->num_computed_tokens()) {
      return fail(r, "blocks do not cover the computed tokens");
    }
    if (r->num_computed_tokens() > r->num_tokens() ||
        r->num_tokens() >= config_.max_model_len) {
      return fail(r, "token counts out of range");
    }
  }
  if (seen.size() != requests_.size()) {
    return absl::InternalError(absl::StrCat(
        requests_.size(), " unfinished requests but ", seen.size(), " queued"));
  }
  if (blocks_.num_tables() != num_running()) {
    return absl::InternalError(absl::StrCat(blocks_.num_tables(),
                                            " block tables for ", num_running(),
                                            " running requests"));
  }
  if (num_running() > config_.max_num_seqs) {
    return absl::InternalError("more running requests than max_num_seqs");
  }
  return blocks_.CheckInvariants();
}

}  // namespace tandem::sched
