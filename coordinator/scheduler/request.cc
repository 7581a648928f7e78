#include "coordinator/scheduler/request.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::sched {

const char* KvPoolName(KvPool pool) {
  switch (pool) {
    case KvPool::kGpu:
      return "gpu";
    case KvPool::kCpu:
      return "cpu";
  }
  return "?";
}

const char* RequestStatusName(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kPreempted:
      return "preempted";
    case RequestStatus::kFinished:
      return "finished";
  }
  return "?";
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

absl::Status SamplingParams::Validate() const {
  if (max_tokens.has_value() && *max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be at least 1, got ", *max_tokens));
  }
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be a finite value >= 0, got ", temperature));
  }
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  for (const std::string& s : stop) {
    if (s.empty())
      return absl::InvalidArgumentError("stop strings must not be empty");
  }
  for (int32_t t : stop_token_ids) {
    if (t < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop_token_ids: negative id ", t));
    }
  }
  return absl::OkStatus();
}

Request::Request(int64_t id, std::vector<int32_t> prompt_token_ids,
                 std::shared_ptr<const SamplingParams> sampling,
                 int64_t arrival_seq)
    : id_(id),
      arrival_seq_(arrival_seq),
      prompt_(std::move(prompt_token_ids)),
      sampling_(std::move(sampling)) {
  TANDEM_CHECK(sampling_ != nullptr);
}

int32_t Request::token_at(int64_t pos) const {
  TANDEM_CHECK(pos >= 0 && pos < num_tokens());
  return pos < num_prompt_tokens() ? prompt_[pos]
                                   : output_[pos - num_prompt_tokens()];
}

std::vector<int32_t> Request::tokens(int64_t begin, int64_t count) const {
  TANDEM_CHECK(begin >= 0 && count >= 0 && begin + count <= num_tokens());
  std::vector<int32_t> out;
  out.reserve(count);
  for (int64_t p = begin; p < begin + count; ++p) out.push_back(token_at(p));
  return out;
}

std::optional<FinishReason> Request::CheckStop(
    int32_t token, absl::Span<const int32_t> eos_token_ids,
    int64_t max_model_len) const {
  const SamplingParams& p = *sampling_;
  if (!p.ignore_eos && std::find(eos_token_ids.begin(), eos_token_ids.end(),
                                 token) != eos_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
      p.stop_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (p.max_tokens.has_value() && num_output_tokens() >= *p.max_tokens) {
    return FinishReason::kLength;
  }
  if (num_tokens() >= max_model_len) return FinishReason::kLength;
  return std::nullopt;
}

void Request::Admit(KvPool pool, int64_t admit_seq, int64_t cached_tokens) {
  TANDEM_CHECK(status_ == RequestStatus::kWaiting ||
               status_ == RequestStatus::kPreempted);
  TANDEM_CHECK(num_computed_ == 0);
  // At least the last token runs: its logits are what gets sampled.
  TANDEM_CHECK(cached_tokens >= 0 && cached_tokens < num_tokens());
  if (status_ == RequestStatus::kWaiting) {
    cached_prompt_ = std::min(cached_tokens, num_prompt_tokens());
  }
  num_computed_ = cached_tokens;
  prefix_hit_ = cached_tokens;
  status_ = RequestStatus::kRunning;
  kv_pool_ = pool;
  admit_seq_ = admit_seq;
}

void Request::AdvanceComputed(int64_t num_tokens) {
  TANDEM_CHECK(status_ == RequestStatus::kRunning);
  TANDEM_CHECK(num_tokens > 0 &&
               num_computed_ + num_tokens <= this->num_tokens());
  num_computed_ += num_tokens;
}

void Request::AppendOutputToken(int32_t token) {
  TANDEM_CHECK(status_ == RequestStatus::kRunning);
  // A token is sampled only from the logits of the last known token.
  TANDEM_CHECK(num_computed_ == num_tokens());
  output_.push_back(token);
}

void Request::Preempt() {
  TANDEM_CHECK(status_ == RequestStatus::kRunning);
  status_ = RequestStatus::kPreempted;
  num_computed_ = 0;
  kv_pool_.reset();
  admit_seq_ = -1;
  ++num_preemptions_;
}

void Request::MarkFinished(FinishReason reason) {
  TANDEM_CHECK(status_ != RequestStatus::kFinished);
  status_ = RequestStatus::kFinished;
  finish_reason_ = reason;
  kv_pool_.reset();
}

}  // namespace tandem::sched
