// Parsing and validation of /v1/completions and /v1/chat/completions bodies
// into backend requests, with OpenAI semantics (plus vLLM's extra sampling
// fields). Every rejection is an absl::Status carrying the offending param
// (see api_error.h): 400 for bad input, 404 for an unknown model. Unknown
// fields are ignored; known fields of the wrong type are errors.
#ifndef TANDEM_COORDINATOR_FRONTEND_REQUEST_PARSER_H_
#define TANDEM_COORDINATOR_FRONTEND_REQUEST_PARSER_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/frontend/generation_backend.h"
#include "coordinator/frontend/json_fields.h"
#include "coordinator/frontend/ordered_body.h"
#include "coordinator/frontend/reasoning_splitter.h"
#include "coordinator/frontend/tool_call_extractor.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {

enum class Endpoint : int8_t { kCompletions, kChat };

struct ParseOptions {
  // Names the model answers to; the first is used when "model" is absent.
  std::vector<std::string> served_model_names;
  int64_t max_context = 0;    // max_model_len (> 0)
  int64_t vocab_size = 0;     // token ids must be in [0, vocab_size)
  int32_t max_logprobs = 20;  // completions `logprobs`, chat `top_logprobs`
  int32_t max_stop_sequences = 4;  // OpenAI's limit
  int32_t max_prompts = 16;        // prompts in one /v1/completions request
  int64_t default_completion_max_tokens =
      16;  // /v1/completions without max_tokens
  // Defaults for fields the request leaves out (e.g. from generation_config).
  SamplingOptions defaults;
  // Chat answers split into reasoning_content and content (--reasoning-parser).
  ReasoningParser reasoning_parser = ReasoningParser::kNone;
  // Tool calls parsed out of chat answers to requests with tools
  // (--tool-call-parser).
  ToolCallParser tool_call_parser = ToolCallParser::kNone;
};

struct PromptInput {
  std::vector<int32_t> ids;
  std::optional<std::string> text;  // set when the prompt came as text
  int64_t max_tokens = 0;           // resolved for this prompt
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt is prepended
  bool logprobs = false;       // log-probs in the response
  int32_t top_logprobs = 0;    // alternatives per token when logprobs
  bool return_tokens_as_token_ids = false;  // log-prob tokens read "token_id:N"
  ReasoningParser reasoning_parser = ReasoningParser::kNone;  // chat only
  ToolCallParser tool_call_parser = ToolCallParser::kNone;    // chat with tools only
  // tool_choice named a function: its call ends with finish_reason "stop",
  // as OpenAI and vLLM report it ("tool_calls" for "required" and "auto").
  bool tool_choice_named = false;
  // One per choice: /v1/completions takes a list of prompts; chat has one.
  std::vector<PromptInput> prompts;
  // Shared by every prompt; max_tokens is per prompt (PromptInput).
  SamplingOptions sampling;
};

// `body_text`: the body as received, from which JSON Schemas are read
// with their properties in the order written (ordered_body.h); empty for
// a body built in code (the properties are then declared by name).
absl::StatusOr<ParsedRequest> ParseCompletionRequest(const nlohmann::json& body,
                                                     const ParseOptions& options,
                                                     const TextProcessor& text,
                                                     std::string_view body_text = {});
absl::StatusOr<ParsedRequest> ParseChatRequest(const nlohmann::json& body,
                                               const ParseOptions& options,
                                               const TextProcessor& text,
                                               std::string_view body_text = {});

// A chat body's prompt as /v1/chat/completions renders it: its messages
// through the chat template with the body's template options and tools.
struct RenderedChat {
  std::string text;
  bool tools_offered = false;  // tools given and tool_choice not "none"
};
absl::StatusOr<RenderedChat> RenderChatPrompt(const nlohmann::json& body,
                                              const TextProcessor& text);

// One backend request per prompt, ids "<request_id>-<index>".
std::vector<GenerationRequest> ToGenerationRequests(
    const ParsedRequest& parsed, std::string_view request_id,
    std::chrono::steady_clock::time_point arrival);

// --- shared pieces (sampling_parser.cc) ---

// model, n, best_of, stream, stream_options, user.
absl::Status ParseCommonFields(const FieldReader& r,
                               const ParseOptions& options, ParsedRequest* out);
// temperature, top_p, top_k, min_p, penalties, seed, stop, stop_token_ids,
// ignore_eos, min_tokens, logit_bias, skip_special_tokens,
// include_stop_str_in_output, return_tokens_as_token_ids, and the answer's
// constraint (response_format, structured_outputs, guided_json,
// guided_choice), whose schema is read in order from `ordered`.
absl::Status ParseSamplingFields(const FieldReader& r, const ParseOptions& options,
                                 const OrderedBody& ordered, ParsedRequest* out);
// The served model a request names: nullopt (absent) is the first served
// name; a name not served is ModelNotFound (kNotFound).
absl::StatusOr<std::string> ResolveModelName(
    const std::optional<std::string>& model, const ParseOptions& options);
// A logit_bias key: a token id in [0, vocab_size).
absl::Status CheckLogitBiasId(int64_t id, const ParseOptions& options);
// The ranges the JSON reader enforces while reading (temperature, top_p,
// top_k, min_p, penalties, stop count, stop_token_ids, min_tokens,
// logit_bias, logprobs), checked on options built by other means (the gRPC
// API), with the same messages. Stop strings must be non-empty (the JSON
// reader drops empty ones; callers should too).
absl::Status ValidateSamplingOptions(const SamplingOptions& s,
                                     const ParseOptions& options);
// Checks each prompt against the context and sets its max_tokens:
// `requested` (explicit max_tokens) must fit beside the prompt; otherwise
// `default_max` (nullopt: the rest of the context) is clipped to fit.
// `prompt_param` names the prompt field in errors ("prompt", "messages").
absl::Status ResolveMaxTokens(std::optional<int64_t> requested,
                              std::optional<int64_t> default_max,
                              std::string_view prompt_param,
                              std::string_view max_tokens_param,
                              const ParseOptions& options, ParsedRequest* out);

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_REQUEST_PARSER_H_
