#include "coordinator/service/generation_types.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tandem::coord {
namespace {

constexpr int32_t kMaxTopLogprobs = 20;  // what the workers accept

absl::Status CheckId(int32_t id, int64_t vocab_size, const char* what) {
  if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": token id ", id, " is outside the vocabulary [0, ",
        vocab_size > 0 ? absl::StrCat(vocab_size) : std::string("n"), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGenerationRequest(const GenerationRequest& request,
                                       int64_t vocab_size,
                                       bool have_tokenizer) {
  if (request.prompt_ids.empty()) {
    return absl::InvalidArgumentError("the prompt has no tokens");
  }
  for (int32_t id : request.prompt_ids) {
    if (absl::Status s = CheckId(id, vocab_size, "prompt"); !s.ok()) return s;
  }
  const GenerationParams& p = request.params;
  if (absl::Status s = ToSchedulerParams(p).Validate(); !s.ok()) return s;
  if (p.min_tokens < 0 ||
      (p.max_tokens.has_value() && p.min_tokens > *p.max_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_tokens must be in [0, max_tokens], got ", p.min_tokens));
  }
  if (p.top_logprobs < -1 || p.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs must be in [-1, ", kMaxTopLogprobs,
                     "], got ", p.top_logprobs));
  }
  for (int32_t id : p.stop_token_ids) {
    if (absl::Status s = CheckId(id, vocab_size, "stop_token_ids"); !s.ok()) {
      return s;
    }
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (absl::Status s = CheckId(id, vocab_size, "logit_bias"); !s.ok()) {
      return s;
    }
    if (!std::isfinite(bias)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias for token ", id, " is not finite"));
    }
  }
  if (!p.stop.empty() && !have_tokenizer) {
    return absl::InvalidArgumentError(
        "stop strings need a tokenizer; this server has none (use "
        "stop_token_ids)");
  }
  return absl::OkStatus();
}

sched::SamplingParams ToSchedulerParams(const GenerationParams& params) {
  sched::SamplingParams s;
  s.max_tokens = params.max_tokens;
  s.temperature = params.temperature;
  s.top_p = params.top_p;
  s.top_k = params.top_k;
  s.seed = params.seed;
  s.stop = params.stop;
  s.include_stop_str_in_output = params.include_stop_str_in_output;
  s.stop_token_ids = params.stop_token_ids;
  s.ignore_eos = params.ignore_eos;
  return s;
}

}  // namespace tandem::coord
