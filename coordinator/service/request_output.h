// One request's output on the coordinator: the tokens a step sampled for it
// go through the streaming detokenizer (when there is a tokenizer) and the
// stop-string matcher, and come out as GenerationEvents. A stop string is
// never streamed, not even in part: the matcher holds back text that could
// still turn out to begin one.
//
// Not thread-safe: the step driver owns one per request, under its lock.
#ifndef TANDEM_COORDINATOR_SERVICE_REQUEST_OUTPUT_H_
#define TANDEM_COORDINATOR_SERVICE_REQUEST_OUTPUT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/scheduler/stop_string_matcher.h"
#include "coordinator/service/generation_types.h"

namespace tandem::coord {

class RequestOutput {
 public:
  // `tokenizer` may be null (events then carry ids and no text); it must
  // outlive this object.
  RequestOutput(int64_t request_id, int64_t num_prompt_tokens,
                const GenerationParams& params, const Tokenizer* tokenizer);

  // Adds a sampled token. `logprob` is kept when the request asked for
  // log-probs. `scheduler_finish` is the scheduler's verdict on this token
  // (kStop: EOS or a stop token id, kLength: max_tokens or the context).
  // Returns why the request is finished now: the scheduler's verdict, or
  // kStop when the text reached a stop string (the caller then finishes the
  // request in the scheduler). Tokens after a finish are ignored.
  std::optional<FinishReason> AddToken(
      int32_t token, const std::optional<TokenLogprob>& logprob,
      std::optional<FinishReason> scheduler_finish);

  // Tokens or text not yet handed out in an event.
  bool has_pending() const {
    return !pending_.token_ids.empty() || !pending_.text.empty();
  }
  // Everything since the previous event, not finished.
  GenerationEvent TakeEvent();
  // The last event: what is pending, plus (for kStop and kLength) the text
  // held back so far, the finish reason, `status` and the usage.
  GenerationEvent TakeFinalEvent(FinishReason reason,
                                 absl::Status status = absl::OkStatus());

  // Seconds from arrival to the first step; reported in the first event
  // that carries tokens.
  void set_queue_time(double seconds) {
    if (queue_time_s_ < 0) queue_time_s_ = seconds;
  }
  bool queue_time_known() const { return queue_time_s_ >= 0; }
  // Prompt tokens whose KV came from the prefix cache (reported in the
  // final event's usage; unset: prefix caching is off).
  void set_cached_prompt_tokens(int64_t n) { cached_prompt_tokens_ = n; }

  int64_t request_id() const { return request_id_; }
  int64_t num_generated() const { return num_generated_; }
  // All text handed out or pending so far.
  const std::string& text() const { return text_; }
  bool stopped() const { return finish_.has_value(); }

 private:
  void AppendText(const std::string& piece);

  const int64_t request_id_;
  const int64_t num_prompt_tokens_;
  const bool want_logprobs_;
  std::unique_ptr<StreamingDetokenizer> detok_;  // null without a tokenizer
  sched::StopStringMatcher matcher_;
  GenerationEvent pending_;
  std::string text_;
  int64_t num_generated_ = 0;
  double queue_time_s_ = -1.0;
  bool queue_time_sent_ = false;
  int64_t cached_prompt_tokens_ = -1;
  std::optional<FinishReason> finish_;  // set once a finish is known
  std::optional<std::string> stop_string_;
  std::optional<int32_t> stop_token_id_;
};

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_REQUEST_OUTPUT_H_
