// What the step driver takes in and gives out: a generation request (token
// ids and sampling options) and the stream of events it produces. The shapes
// follow coordinator/frontend/generation_backend.h so that an adapter is a
// field-by-field copy: events carry token ids, their log-probs, the text
// delta (stop strings already applied) and, on the last event, the finish
// reason and usage.
#ifndef TANDEM_COORDINATOR_SERVICE_GENERATION_TYPES_H_
#define TANDEM_COORDINATOR_SERVICE_GENERATION_TYPES_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/scheduler/request.h"

namespace tandem::structured {
class CompiledSchema;
}

namespace tandem::coord {

using sched::FinishReason;  // kStop, kLength, kAbort, kError

struct GenerationParams {
  // Tokens to generate at most; nullopt: until a stop condition or the
  // context limit.
  std::optional<int64_t> max_tokens;
  // EOS (unless ignore_eos) and stop_token_ids cannot be sampled before this
  // many tokens were generated (a -1e9 logit bias on them).
  int64_t min_tokens = 0;
  float temperature = 1.0f;  // >= 0; 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = -1;        // <= 0: disabled
  // The sampler of token k is seeded from (seed, k), as in `tandem
  // generate`, so a seeded request gives the same tokens alone or batched.
  // nullopt: the driver's default_seed, else a random seed.
  std::optional<uint64_t> seed;
  // Stop strings (need a tokenizer): the text is cut before the first match
  // (after it with include_stop_str_in_output) and never streamed past it.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  std::vector<int32_t> stop_token_ids;  // finish with kStop when sampled
  bool ignore_eos = false;              // disables the model's EOS ids only
  bool skip_special_tokens = true;      // for the text deltas
  std::map<int32_t, float> logit_bias;  // token id -> added to the logit
  // -1: no log-probs. k in [0, 20]: each generated token's log-prob plus the
  // k most likely alternatives.
  int32_t top_logprobs = -1;
  // Constrained decoding: the answer is one JSON object (needs a
  // tokenizer); only tokens that keep it valid are sampled, and the end of
  // generation only once it is whole.
  bool json_object = false;
  // The same for the JSON texts a JSON Schema allows (json_object is then
  // false).
  std::shared_ptr<const structured::CompiledSchema> json_schema;
};

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;  // non-empty
  GenerationParams params;
  // When the request arrived (for queue_time_s); default: at Submit.
  std::optional<std::chrono::steady_clock::time_point> arrival_time;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), best first
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // tokens sampled (stop-string tokens too)
  // Prompt tokens served from the prefix cache; -1: prefix caching is off.
  int64_t cached_prompt_tokens = -1;
};

// One streamed piece of a request's output. Events of one request are
// delivered in order, one at a time, from the driver's thread; exactly one
// has finished = true and it is the last.
struct GenerationEvent {
  int64_t request_id = 0;
  // Tokens sampled since the previous event (usually one; none in a final
  // event that only reports an abort or an error). A stop token (EOS or one
  // of stop_token_ids) is included here but adds no text.
  std::vector<int32_t> token_ids;
  // Parallel to token_ids when params.top_logprobs >= 0; empty otherwise.
  std::vector<TokenLogprob> logprobs;
  // Text added by these tokens: "" without a tokenizer, and while an
  // incomplete UTF-8 character or a possible stop string is held back.
  std::string text;

  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;  // valid when finished
  // What stopped it, for kStop: the matched stop string or the stop token.
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  // Non-OK with kError: why the request failed after it was accepted (worker
  // lost: kUnavailable; prompt too long for the KV cache: kResourceExhausted
  // or kInvalidArgument). kUnavailable with kAbort at driver shutdown.
  absl::Status status;
  // Set on the final event.
  Usage usage;
  // Seconds from arrival to the first step that ran the request; set in the
  // first event that carries tokens (< 0 elsewhere).
  double queue_time_s = -1.0;
};

// Returns false when the consumer is gone: the driver then aborts the
// request (frees its KV at once) and calls no more for it. Must not block.
using EventCallback = std::function<bool(const GenerationEvent&)>;

// InvalidArgument naming the field; `vocab_size` > 0 also checks ids.
absl::Status ValidateGenerationRequest(const GenerationRequest& request,
                                       int64_t vocab_size,
                                       bool have_tokenizer);

// The scheduler's view of the params (stop strings stay with the driver).
sched::SamplingParams ToSchedulerParams(const GenerationParams& params);

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_GENERATION_TYPES_H_
