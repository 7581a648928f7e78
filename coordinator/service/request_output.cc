#include "coordinator/service/request_output.h"

#include <cmath>
#include <limits>
#include <utility>

namespace tandem::coord {

RequestOutput::RequestOutput(int64_t request_id, int64_t num_prompt_tokens,
                             const GenerationParams& params,
                             const Tokenizer* tokenizer)
    : request_id_(request_id),
      num_prompt_tokens_(num_prompt_tokens),
      want_logprobs_(params.top_logprobs >= 0),
      matcher_(params.stop, params.include_stop_str_in_output) {
  if (tokenizer != nullptr) {
    detok_ = std::make_unique<StreamingDetokenizer>(
        *tokenizer, params.skip_special_tokens);
  }
  pending_.request_id = request_id;
}

void RequestOutput::AppendText(const std::string& piece) {
  // After a stop string nothing more goes out (Push returns "").
  const std::string released = matcher_.Push(piece);
  pending_.text += released;
  text_ += released;
}

std::optional<FinishReason> RequestOutput::AddToken(
    int32_t token, const std::optional<TokenLogprob>& logprob,
    std::optional<FinishReason> scheduler_finish) {
  if (finish_.has_value()) return finish_;
  ++num_generated_;
  pending_.token_ids.push_back(token);
  if (want_logprobs_) {
    pending_.logprobs.push_back(logprob.value_or(
        TokenLogprob{token, std::numeric_limits<float>::quiet_NaN(), {}}));
  }
  // A stop token (EOS or stop_token_ids) ends the output without text.
  const bool stop_token = scheduler_finish == FinishReason::kStop;
  if (!stop_token && detok_ != nullptr) AppendText(detok_->Push(token));
  if (matcher_.stopped()) {
    finish_ = FinishReason::kStop;
    stop_string_ = std::string(matcher_.matched());
    return finish_;
  }
  if (!scheduler_finish.has_value()) return std::nullopt;
  if (stop_token) stop_token_id_ = token;
  finish_ = scheduler_finish;
  // The end for another reason: release what the detokenizer and the
  // matcher hold back (a stop string may still complete in the flushed
  // bytes; then it wins).
  if (detok_ != nullptr) AppendText(detok_->Flush());
  if (matcher_.stopped()) {
    finish_ = FinishReason::kStop;
    stop_string_ = std::string(matcher_.matched());
    stop_token_id_.reset();
  } else {
    const std::string rest = matcher_.Flush();
    pending_.text += rest;
    text_ += rest;
  }
  return finish_;
}

GenerationEvent RequestOutput::TakeEvent() {
  GenerationEvent e = std::move(pending_);
  pending_ = GenerationEvent();
  pending_.request_id = request_id_;
  e.request_id = request_id_;
  if (!queue_time_sent_ && !e.token_ids.empty() && queue_time_s_ >= 0) {
    e.queue_time_s = queue_time_s_;
    queue_time_sent_ = true;
  }
  return e;
}

GenerationEvent RequestOutput::TakeFinalEvent(FinishReason reason,
                                              absl::Status status) {
  if (!finish_.has_value()) finish_ = reason;
  GenerationEvent e = TakeEvent();
  e.finished = true;
  e.finish_reason = reason;
  if (reason == FinishReason::kStop) {
    e.stop_string = stop_string_;
    e.stop_token_id = stop_token_id_;
  }
  e.status = std::move(status);
  e.usage.prompt_tokens = num_prompt_tokens_;
  e.usage.completion_tokens = num_generated_;
  e.usage.cached_prompt_tokens = cached_prompt_tokens_;
  return e;
}

}  // namespace tandem::coord
