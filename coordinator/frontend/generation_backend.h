// The two interfaces through which the HTTP frontend reaches the rest of the
// coordinator: GenerationBackend (the scheduler / step driver: runs a request
// and reports its tokens) and TextProcessor (tokenizer + chat template). The
// frontend owns the OpenAI API: parsing, validation, response formats, SSE,
// auth, admission, metrics. It never detokenizes a stream nor matches stop
// strings: the backend sends text deltas with stop strings already applied.
//
// Backend contract (what an implementation must do):
//  - Submit() does not block on generation: it validates/queues and returns.
//    A non-OK status means the request was not accepted and `on_event` will
//    never be called. Codes: kResourceExhausted / kUnavailable = overloaded or
//    not serving (HTTP 503 + Retry-After); kInvalidArgument = the request
//    cannot be served as asked, e.g. a sampling option the engine lacks (400);
//    anything else is a 500.
//  - After an OK Submit, `on_event` is called one or more times, never
//    concurrently for one request, from any thread (possibly from inside
//    Submit). Exactly one event has finished = true and it is the last one.
//  - `on_event` returning false means the client is gone: the backend must
//    stop the request at once (free its KV) and make no further calls for it.
//  - Cancel(request_id) asks for the same from the frontend's side (client
//    disconnect noticed while no event was in flight, server shutdown). It is
//    idempotent, may race with the request finishing, and unknown ids are
//    ignored. After Cancel the backend may still call `on_event` (it will
//    return false) or stop calling it; the frontend needs neither.
//  - on_event must not block for long; it only queues the event.
//
// Thread-safety: every method of both interfaces may be called concurrently.
#ifndef TANDEM_COORDINATOR_FRONTEND_GENERATION_BACKEND_H_
#define TANDEM_COORDINATOR_FRONTEND_GENERATION_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::structured {
class CompiledSchema;
}

namespace tandem::frontend {

// Sampling and stop options, already validated by the frontend.
struct SamplingOptions {
  int64_t max_tokens = 16;         // >= 1; prompt + max_tokens <= max_context()
  int64_t min_tokens = 0;          // EOS / stop ids suppressed before this many
  float temperature = 1.0f;        // [0, 2]; 0 = greedy
  float top_p = 1.0f;              // (0, 1]
  int32_t top_k = -1;              // <= 0: disabled
  float min_p = 0.0f;              // [0, 1]
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  std::optional<uint64_t> seed;
  // Stop strings: the backend cuts the text before the match (or after it
  // when include_stop_str_in_output) and finishes with kStop.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  std::vector<int32_t> stop_token_ids;  // each in [0, vocab)
  bool ignore_eos = false;              // disables the model's EOS ids only
  bool skip_special_tokens = true;      // for the text deltas
  std::map<int32_t, float> logit_bias;  // token id -> bias in [-100, 100]
  // -1: no log-probs. k >= 0: each generated token's log-prob plus the k most
  // likely alternatives (TokenLogprob::top, most likely first).
  int32_t logprobs = -1;
  // -1: none. k >= 0: log-probs of every prompt token (echo), with k
  // alternatives each; delivered once in the first event.
  int32_t prompt_logprobs = -1;
  // response_format {"type": "json_object"}: sampling is confined to tokens
  // that keep the answer a valid JSON object, and ends when it is whole.
  bool json_object = false;
  // response_format {"type": "json_schema"}: the same for the JSON texts the
  // schema allows (json_object is then false).
  std::shared_ptr<const structured::CompiledSchema> json_schema;
};

struct GenerationRequest {
  std::string request_id;  // unique; "cmpl-…-0" (… -<choice index>)
  std::vector<int32_t> prompt_ids;  // non-empty, each in [0, vocab)
  SamplingOptions sampling;
  std::chrono::steady_clock::time_point
      arrival_time;  // when the HTTP request came
};

enum class FinishReason : int8_t {
  kStop,    // EOS, stop token id or stop string
  kLength,  // max_tokens or the context limit
  kAbort,   // cancelled or aborted by the engine (reported as "abort")
};
std::string_view FinishReasonName(
    FinishReason reason);  // "stop", "length", "abort"

struct TokenLogprob {
  int32_t id = 0;
  // NaN for the first prompt token (no context to predict it from).
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), best first
};

struct GenerationEvent {
  // Tokens sampled since the previous event (usually one; may be several,
  // or none in a final event).
  std::vector<int32_t> token_ids;
  // Parallel to token_ids when sampling.logprobs >= 0; empty otherwise.
  std::vector<TokenLogprob> logprobs;
  // When sampling.prompt_logprobs >= 0: in the first event only, one entry
  // per prompt token (entry 0 has logprob NaN and no alternatives).
  std::vector<TokenLogprob> prompt_logprobs;
  // Detokenized text added by these tokens (stop strings applied; may be ""
  // while an incomplete UTF-8 character or a possible stop string is held).
  std::string text;

  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;  // valid when finished
  // What stopped it, if kStop: the matched stop string, or the stop token id
  // (EOS included); neither for a plain EOS if the backend does not say.
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  // Non-OK (with finished = true): the request failed after it was accepted
  // (worker lost -> kUnavailable, ...).
  absl::Status status;

  // Seconds between arrival and first scheduling; set in the first event
  // that carries tokens, when the backend knows it (< 0: unknown).
  double queue_time_s = -1.0;
  // In the final event: prompt tokens whose KV the prefix cache held (the
  // OpenAI usage's prompt_tokens_details.cached_tokens); -1: the backend
  // does not cache prefixes.
  int64_t cached_prompt_tokens = -1;
};

// Returns false when the client is gone (see the contract above).
using EventCallback = std::function<bool(const GenerationEvent&)>;

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  virtual absl::Status Submit(GenerationRequest request,
                              EventCallback on_event) = 0;
  virtual void Cancel(const std::string& request_id) = 0;
  // True once every worker has loaded its shard and requests can run.
  virtual bool Ready() const = 0;
  // max_model_len: prompt + generated tokens of one request.
  virtual int64_t max_context() const = 0;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::json tools;                              // null or an array
  nlohmann::json kwargs = nlohmann::json::object();  // chat_template_kwargs
};

class TextProcessor {
 public:
  virtual ~TextProcessor() = default;
  // add_special: add BOS/EOS as the model's tokenizer config asks (true for
  // /v1/completions text prompts; false for rendered chat templates).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text, bool add_special) const = 0;
  // Text of a token sequence (echo of a prompt given as ids).
  virtual absl::StatusOr<std::string> Decode(
      const std::vector<int32_t>& ids) const = 0;
  // The bytes token `id` decodes to on its own, for log-prob entries. May be
  // part of a UTF-8 character (byte-level vocabularies).
  virtual std::string TokenText(int32_t id) const = 0;
  // The token's vocabulary entry ("▁Hello", "Ġworld", "<0x0A>"), for
  // /tokenize's token_strs; by default the bytes it decodes to.
  virtual std::string TokenPiece(int32_t id) const { return TokenText(id); }
  virtual int64_t vocab_size() const = 0;
  // messages: a JSON array of objects with "role" and "content" (a string,
  // text parts already joined, or null) plus any other fields the client
  // sent ("name", "tool_calls", "tool_call_id"). kInvalidArgument when the
  // template rejects them (reported as HTTP 400).
  virtual absl::StatusOr<std::string> ApplyChatTemplate(
      const nlohmann::json& messages,
      const ChatTemplateOptions& options) const = 0;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_GENERATION_BACKEND_H_
