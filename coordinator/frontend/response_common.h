// Pieces shared by the non-streaming responses (response_builder.h) and the
// SSE stream (sse_stream.h): per-choice state, echo, usage, and the two
// OpenAI log-prob formats.
//   completions: {"tokens":[…],"token_logprobs":[…],"top_logprobs":[{tok:lp}],
//                 "text_offset":[…]}
//   chat:        {"content":[{"token","logprob","bytes","top_logprobs":[…]}]}
// Token strings are the token's own text (invalid UTF-8 replaced by U+FFFD),
// or "token_id:N" with return_tokens_as_token_ids. Log-probs of -inf read
// -9999.0 (as vLLM); the first prompt token's (none) reads null.
#ifndef TANDEM_COORDINATOR_FRONTEND_RESPONSE_COMMON_H_
#define TANDEM_COORDINATOR_FRONTEND_RESPONSE_COMMON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/frontend/generation_backend.h"
#include "coordinator/frontend/request_parser.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {

using ojson = nlohmann::ordered_json;

// Serializes API output; never throws (invalid UTF-8 is replaced).
std::string DumpJson(const ojson& j);
// Replaces ill-formed UTF-8 sequences with U+FFFD.
std::string SanitizeUtf8(std::string_view s);
// Number of code points (after sanitizing).
int64_t Utf8Length(std::string_view s);

struct ResponseContext {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;
  std::string model;
  bool echo = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool as_token_ids = false;
  bool include_usage = false;
  ReasoningParser reasoning_parser = ReasoningParser::kNone;  // chat answers
  ToolCallParser tool_call_parser = ToolCallParser::kNone;    // chat answers
  // The answer's calls end with finish_reason "stop", not "tool_calls".
  bool calls_finish_as_stop = false;

  static ResponseContext From(const ParsedRequest& req, std::string id,
                              int64_t created);
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens served from the prefix cache; -1: not reported (the
  // backend does not cache prefixes), else prompt_tokens_details is given.
  int64_t cached_tokens = -1;
  // Folds in one choice's figures.
  void Add(int64_t prompt, int64_t completion, int64_t cached);
  ojson ToJson() const;
};

// What one event adds to a choice, after echo and log-prob merging.
struct ChoiceDelta {
  std::string text;
  std::vector<TokenLogprob> logprobs;  // prompt entries (echo) first
  bool finished = false;
  std::string finish_reason;
  ojson stop_reason;  // null, a string or an id
};

// Per-choice state; one per prompt.
class ChoiceState {
 public:
  ChoiceState(const ResponseContext& ctx, const PromptInput& prompt);

  // Folds in one event and returns what it adds to the response.
  ChoiceDelta Apply(const GenerationEvent& e, const TextProcessor& tp);

  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t cached_prompt_tokens() const { return cached_prompt_tokens_; }  // -1: unknown
  bool finished() const { return finished_; }
  bool started() const { return started_; }
  // Running code-point offset for completions text_offset.
  int64_t text_offset() const { return text_offset_; }
  void set_text_offset(int64_t v) { text_offset_ = v; }

 private:
  const ResponseContext& ctx_;
  const PromptInput& prompt_;
  int64_t prompt_tokens_;
  int64_t completion_tokens_ = 0;
  int64_t cached_prompt_tokens_ = -1;
  int64_t text_offset_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

// Log-prob formatting.
class LogprobFormatter {
 public:
  LogprobFormatter(const TextProcessor& tp, const ResponseContext& ctx)
      : tp_(tp), ctx_(ctx) {}
  std::string TokenString(int32_t id) const;
  // Raw bytes of the token (of "token_id:N" with as_token_ids).
  std::string TokenBytes(int32_t id) const;

  // Completions object for `entries`; `offset` is the running text_offset
  // (code points), advanced past every token.
  ojson Completion(const std::vector<TokenLogprob>& entries,
                   int64_t* offset) const;
  // Chat {"content":[…]} for `entries`.
  ojson Chat(const std::vector<TokenLogprob>& entries) const;

 private:
  const TextProcessor& tp_;
  const ResponseContext& ctx_;
};

ojson LogprobValue(float lp);  // null for NaN, -9999 for -inf

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_RESPONSE_COMMON_H_
