// POST /v1/completions: prompt (text, list of texts, token ids, list of token
// id lists), echo, integer logprobs, suffix (unsupported).
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/request_parser.h"

namespace tandem::frontend {
namespace {

using nlohmann::json;

absl::StatusOr<std::vector<int32_t>> TokenIds(const json& arr,
                                              const std::string& name,
                                              int64_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(
        int64_t id, JsonToInt(arr[i], absl::StrCat(name, "[", i, "]"), 0,
                              std::max<int64_t>(vocab_size - 1, 0)));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

absl::StatusOr<PromptInput> TextPrompt(std::string text,
                                       const std::string& name,
                                       bool add_special,
                                       const TextProcessor& tp) {
  PromptInput p;
  auto ids = tp.Encode(text, add_special);
  if (!ids.ok()) return WithParam(ids.status(), name);
  p.ids = std::move(*ids);
  p.text = std::move(text);
  return p;
}

// The `prompt` field in any of its four forms.
absl::StatusOr<std::vector<PromptInput>> ParsePrompts(
    const json& prompt, const ParseOptions& options, bool add_special,
    const TextProcessor& tp) {
  std::vector<PromptInput> out;
  if (prompt.is_string()) {
    TANDEM_ASSIGN_OR_RETURN(auto p, TextPrompt(prompt.get<std::string>(),
                                               "prompt", add_special, tp));
    out.push_back(std::move(p));
  } else if (prompt.is_array()) {
    if (prompt.empty())
      return InvalidParam("prompt", "'prompt' must not be empty");
    const json& first = prompt[0];
    if (first.is_number()) {  // one prompt of token ids
      TANDEM_ASSIGN_OR_RETURN(auto ids,
                              TokenIds(prompt, "prompt", options.vocab_size));
      out.push_back(PromptInput{std::move(ids), std::nullopt, 0});
    } else if (first.is_string() || first.is_array()) {  // a batch
      if (static_cast<int64_t>(prompt.size()) > options.max_prompts) {
        return InvalidParam(
            "prompt",
            absl::StrCat("At most ", options.max_prompts,
                         " prompts per request, got ", prompt.size()));
      }
      for (size_t i = 0; i < prompt.size(); ++i) {
        const json& e = prompt[i];
        std::string name = absl::StrCat("prompt[", i, "]");
        if (first.is_string() && e.is_string()) {
          TANDEM_ASSIGN_OR_RETURN(
              auto p, TextPrompt(e.get<std::string>(), name, add_special, tp));
          out.push_back(std::move(p));
        } else if (first.is_array() && e.is_array()) {
          TANDEM_ASSIGN_OR_RETURN(auto ids,
                                  TokenIds(e, name, options.vocab_size));
          out.push_back(PromptInput{std::move(ids), std::nullopt, 0});
        } else {
          return WrongType(
              name, first.is_string() ? "a string" : "a list of token ids",
              JsonTypeName(e));
        }
      }
    } else {
      return WrongType("prompt[0]",
                       "a string, a token id or a list of token ids",
                       JsonTypeName(first));
    }
  } else {
    return WrongType("prompt", "a string or a list", JsonTypeName(prompt));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].ids.empty()) {
      return InvalidParam(out.size() == 1 ? std::string("prompt")
                                          : absl::StrCat("prompt[", i, "]"),
                          "The prompt must contain at least one token");
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ParsedRequest> ParseCompletionRequest(const json& body, const ParseOptions& options,
                                                     const TextProcessor& text,
                                                     std::string_view body_text) {
  if (!body.is_object()) {
    return WrongType("body", "a JSON object", JsonTypeName(body));
  }
  ParsedRequest out;
  out.endpoint = Endpoint::kCompletions;
  out.sampling = options.defaults;
  FieldReader r(body);
  TANDEM_RETURN_IF_ERROR(ParseCommonFields(r, options, &out));
  const OrderedBody ordered(body_text);
  TANDEM_RETURN_IF_ERROR(ParseSamplingFields(r, options, ordered, &out));

  TANDEM_ASSIGN_OR_RETURN(auto echo, r.Bool("echo"));
  out.echo = echo.value_or(false);
  TANDEM_ASSIGN_OR_RETURN(auto logprobs,
                          r.Int("logprobs", 0, options.max_logprobs));
  if (logprobs.has_value()) {
    out.logprobs = true;
    out.top_logprobs = static_cast<int32_t>(*logprobs);
    out.sampling.logprobs = out.top_logprobs;
    if (out.echo) out.sampling.prompt_logprobs = out.top_logprobs;
  }
  TANDEM_ASSIGN_OR_RETURN(auto suffix, r.String("suffix"));
  if (suffix.has_value() && !suffix->empty()) {
    return InvalidParam("suffix", "'suffix' (insertion) is not supported");
  }
  TANDEM_ASSIGN_OR_RETURN(auto add_special, r.Bool("add_special_tokens"));
  TANDEM_ASSIGN_OR_RETURN(
      auto max_tokens,
      r.Int("max_tokens", 1, std::numeric_limits<int64_t>::max()));

  const json* prompt = r.Find("prompt");
  if (prompt == nullptr) return MissingParam("prompt");
  TANDEM_ASSIGN_OR_RETURN(
      out.prompts,
      ParsePrompts(*prompt, options, add_special.value_or(true), text));
  TANDEM_RETURN_IF_ERROR(
      ResolveMaxTokens(max_tokens, options.default_completion_max_tokens,
                       "prompt", "max_tokens", options, &out));
  return out;
}

}  // namespace tandem::frontend
