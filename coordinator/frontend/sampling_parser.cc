// Fields shared by /v1/completions and /v1/chat/completions.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/request_parser.h"
#include "coordinator/structured/json_schema.h"

namespace tandem::frontend {
namespace {

using nlohmann::json;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The ranges of the sampling fields: one place for the JSON reader below and
// for ValidateSamplingOptions (the gRPC API), so both APIs accept the same.
constexpr double kMaxTemperature = 2.0;        // [0, 2]
constexpr double kMaxPenalty = 2.0;            // presence, frequency: [-2, 2]
constexpr double kMaxRepetitionPenalty = 1e6;  // (0, 1e6]
constexpr double kMaxLogitBias = 100.0;        // [-100, 100]

// The JSON reader's range messages (JsonToInt, JsonToNumber), for typed
// values.
absl::Status CheckIntRange(std::string_view name, int64_t v, int64_t min,
                           int64_t max) {
  if (v >= min && v <= max) return absl::OkStatus();
  std::string range = max == kInt64Max
                          ? absl::StrCat(">= ", min)
                          : absl::StrCat("in [", min, ", ", max, "]");
  return InvalidParam(name, absl::StrCat("'", std::string(name), "' must be ",
                                         range, ", got ", v));
}

absl::Status CheckRange(std::string_view name, double v, double min,
                        double max) {
  if (std::isfinite(v) && v >= min && v <= max) return absl::OkStatus();
  return InvalidParam(
      name, absl::StrCat("'", std::string(name), "' must be in [", min, ", ",
                         max, "], got ", v));
}

absl::Status ParseLogitBias(const FieldReader& r, const ParseOptions& options,
                            SamplingOptions* s) {
  TANDEM_ASSIGN_OR_RETURN(const json* bias, r.Object("logit_bias"));
  if (bias == nullptr) return absl::OkStatus();
  s->logit_bias.clear();
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    const std::string& key = it.key();
    std::string name = absl::StrCat("logit_bias.", key);
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 18 &&
                  std::all_of(key.begin(), key.end(),
                              [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || !absl::SimpleAtoi(key, &id)) {
      return InvalidParam(
          "logit_bias",
          absl::StrCat(
              "logit_bias keys must be token ids (decimal strings), got '", key,
              "'"));
    }
    TANDEM_RETURN_IF_ERROR(CheckLogitBiasId(id, options));
    TANDEM_ASSIGN_OR_RETURN(
        double v,
        JsonToNumber(it.value(), name, -kMaxLogitBias, kMaxLogitBias));
    s->logit_bias[static_cast<int32_t>(id)] = static_cast<float>(v);
  }
  return absl::OkStatus();
}

// A schema given as a JSON object (at `pointer` in the body, read from
// there in the order written), or as its text (vLLM takes both).
absl::Status CompileSchemaParam(const json& schema, std::string_view param,
                                const std::string& pointer, const OrderedBody& ordered,
                                SamplingOptions* s) {
  nlohmann::ordered_json use;
  if (schema.is_string()) {
    use = nlohmann::ordered_json::parse(schema.get<std::string>(), nullptr,
                                        /*allow_exceptions=*/false);
    if (use.is_discarded()) {
      return InvalidParam(param, absl::StrCat("'", std::string(param), "' is not valid JSON"));
    }
  } else {
    use = ordered.At(pointer, schema);
  }
  auto compiled = structured::CompiledSchema::Compile(use);
  if (!compiled.ok()) {
    return InvalidParam(param,
                        absl::StrCat("Unsupported JSON Schema: ", compiled.status().message()));
  }
  s->json_schema = *std::move(compiled);
  return absl::OkStatus();
}

// A list of choices (vLLM's guided_choice): the text is one of them.
absl::Status CompileChoiceParam(const json& choices, std::string_view param, SamplingOptions* s) {
  std::vector<std::string> list;
  if (choices.is_array()) {
    for (const json& c : choices) {
      if (!c.is_string()) break;
      list.push_back(c.get<std::string>());
    }
  }
  if (!choices.is_array() || choices.empty() || list.size() != choices.size()) {
    return InvalidParam(
        param, absl::StrCat("'", std::string(param), "' must be a non-empty list of strings"));
  }
  auto compiled = structured::CompiledSchema::Choice(list);
  if (!compiled.ok()) return InvalidParam(param, std::string(compiled.status().message()));
  s->json_schema = *std::move(compiled);
  return absl::OkStatus();
}

// response_format: "text", "json_object" (JSON mode) or "json_schema"
// (OpenAI's structured outputs: {"name", "schema", "strict",
// "description"}). The schema is compiled here, so one the recognizer
// cannot hold the answer to is a 400 before anything runs.
absl::Status ParseResponseFormat(const json& format, const OrderedBody& ordered,
                                 SamplingOptions* s) {
  FieldReader fr(format, "response_format.");
  TANDEM_ASSIGN_OR_RETURN(auto type, fr.String("type"));
  if (!type.has_value()) return MissingParam("response_format.type");
  if (*type == "text") return absl::OkStatus();
  if (*type == "json_object") {
    s->json_object = true;
    return absl::OkStatus();
  }
  if (*type != "json_schema") {
    return InvalidParam("response_format.type",
                        absl::StrCat("response_format type '", *type,
                                     "' is not supported (\"text\", \"json_object\" or "
                                     "\"json_schema\")"));
  }
  TANDEM_ASSIGN_OR_RETURN(const json* spec, fr.Object("json_schema"));
  if (spec == nullptr) return MissingParam("response_format.json_schema");
  FieldReader sr(*spec, "response_format.json_schema.");
  TANDEM_ASSIGN_OR_RETURN(auto name, sr.String("name"));
  if (!name.has_value()) return MissingParam("response_format.json_schema.name");
  TANDEM_ASSIGN_OR_RETURN(auto strict, sr.Bool("strict"));  // always enforced
  (void)strict;
  TANDEM_ASSIGN_OR_RETURN(auto description, sr.String("description"));
  (void)description;
  const json* schema = sr.Find("schema");
  if (schema == nullptr || schema->is_null()) {
    return MissingParam("response_format.json_schema.schema");
  }
  if (!schema->is_object() && !schema->is_boolean()) {
    return WrongType("response_format.json_schema.schema", "an object", JsonTypeName(*schema));
  }
  return CompileSchemaParam(*schema, "response_format.json_schema.schema",
                            "/response_format/json_schema/schema", ordered, s);
}

// vLLM's structured_outputs: {"json": schema, "choice": [...],
// "json_object": true}; "regex", "grammar" and "structural_tag" are refused.
absl::Status ParseVllmStructuredOutputs(const json& so, const OrderedBody& ordered,
                                        SamplingOptions* s) {
  int kinds = 0;
  for (const auto& [key, value] : so.items()) {
    if (value.is_null()) continue;
    const std::string param = "structured_outputs." + key;
    if (key == "json") {
      TANDEM_RETURN_IF_ERROR(
          CompileSchemaParam(value, param, "/structured_outputs/json", ordered, s));
    } else if (key == "choice") {
      TANDEM_RETURN_IF_ERROR(CompileChoiceParam(value, param, s));
    } else if (key == "json_object") {
      if (!value.is_boolean()) return WrongType(param, "a boolean", JsonTypeName(value));
      if (!value.get<bool>()) continue;
      s->json_object = true;
    } else if (key == "regex" || key == "grammar" || key == "structural_tag") {
      return InvalidParam(param, absl::StrCat("structured_outputs '", key,
                                              "' is not supported (\"json\", \"choice\" or "
                                              "\"json_object\")"));
    } else {
      continue;  // backend options (disable_fallback, whitespace_pattern, ...)
    }
    ++kinds;
  }
  if (kinds > 1) {
    return InvalidParam("structured_outputs",
                        "structured_outputs takes one of \"json\", \"choice\" and \"json_object\"");
  }
  return absl::OkStatus();
}

// The constraint on the answer, from whichever field gives it:
// response_format, vLLM's structured_outputs, or its older guided_json and
// guided_choice. At most one of them.
absl::Status ParseStructuredOutputs(const FieldReader& r, const OrderedBody& ordered,
                                    SamplingOptions* s) {
  std::vector<std::string_view> given;
  for (std::string_view key : {"response_format", "structured_outputs", "guided_json",
                               "guided_choice", "guided_regex", "guided_grammar"}) {
    const json* v = r.Find(key);
    if (v == nullptr || v->is_null()) continue;
    if (key == "response_format" && v->is_object() && v->value("type", json()) == "text") continue;
    given.push_back(key);
  }
  if (given.size() > 1) {
    return InvalidParam(given[1],
                        absl::StrCat("'", std::string(given[0]), "' and '", std::string(given[1]),
                                     "' cannot both constrain the answer"));
  }
  TANDEM_ASSIGN_OR_RETURN(const json* format, r.Object("response_format"));
  if (format != nullptr) TANDEM_RETURN_IF_ERROR(ParseResponseFormat(*format, ordered, s));
  TANDEM_ASSIGN_OR_RETURN(const json* so, r.Object("structured_outputs"));
  if (so != nullptr) TANDEM_RETURN_IF_ERROR(ParseVllmStructuredOutputs(*so, ordered, s));
  if (const json* j = r.Find("guided_json"); j != nullptr && !j->is_null()) {
    if (!j->is_object() && !j->is_string()) {
      return WrongType("guided_json", "an object or a string", JsonTypeName(*j));
    }
    TANDEM_RETURN_IF_ERROR(CompileSchemaParam(*j, "guided_json", "/guided_json", ordered, s));
  }
  if (const json* c = r.Find("guided_choice"); c != nullptr && !c->is_null()) {
    TANDEM_RETURN_IF_ERROR(CompileChoiceParam(*c, "guided_choice", s));
  }
  for (std::string_view key : {"guided_regex", "guided_grammar"}) {
    if (const json* v = r.Find(key); v != nullptr && !v->is_null()) {
      return InvalidParam(key, absl::StrCat("'", std::string(key),
                                            "' is not supported (guided_json and guided_choice "
                                            "are)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLogitBiasId(int64_t id, const ParseOptions& options) {
  if (id >= 0 && id < options.vocab_size) return absl::OkStatus();
  return InvalidParam("logit_bias", absl::StrCat("logit_bias token id ", id,
                                                 " is out of vocabulary (size ",
                                                 options.vocab_size, ")"));
}

absl::StatusOr<std::string> ResolveModelName(
    const std::optional<std::string>& model, const ParseOptions& options) {
  const auto& names = options.served_model_names;
  if (!model.has_value()) return names.empty() ? std::string() : names[0];
  if (std::find(names.begin(), names.end(), *model) == names.end()) {
    return ModelNotFound(*model);
  }
  return *model;
}

absl::Status ParseCommonFields(const FieldReader& r,
                               const ParseOptions& options,
                               ParsedRequest* out) {
  // model: optional (vLLM serves its one model when absent).
  TANDEM_ASSIGN_OR_RETURN(auto model, r.String("model"));
  TANDEM_ASSIGN_OR_RETURN(out->model, ResolveModelName(model, options));

  TANDEM_ASSIGN_OR_RETURN(
      auto n, r.Int("n", std::numeric_limits<int64_t>::min(), kInt64Max));
  if (n.has_value() && *n != 1) {
    return InvalidParam(
        "n", absl::StrCat(
                 "Only n=1 is supported (one choice per prompt), got n=", *n));
  }
  TANDEM_ASSIGN_OR_RETURN(
      auto best_of,
      r.Int("best_of", std::numeric_limits<int64_t>::min(), kInt64Max));
  if (best_of.has_value() && *best_of != 1) {
    return InvalidParam(
        "best_of", absl::StrCat("Only best_of=1 is supported, got ", *best_of));
  }

  TANDEM_ASSIGN_OR_RETURN(auto stream, r.Bool("stream"));
  out->stream = stream.value_or(false);
  TANDEM_ASSIGN_OR_RETURN(const json* so, r.Object("stream_options"));
  if (so != nullptr) {
    if (!out->stream) {
      return InvalidParam("stream_options",
                          "stream_options can only be set when stream is true");
    }
    FieldReader sr(*so, "stream_options.");
    TANDEM_ASSIGN_OR_RETURN(auto include_usage, sr.Bool("include_usage"));
    out->include_usage = include_usage.value_or(false);
    TANDEM_ASSIGN_OR_RETURN(auto continuous, sr.Bool("continuous_usage_stats"));
    (void)continuous;
  }
  TANDEM_ASSIGN_OR_RETURN(auto user, r.String("user"));  // accepted, ignored
  (void)user;
  return absl::OkStatus();
}

absl::Status ParseSamplingFields(const FieldReader& r, const ParseOptions& options,
                                 const OrderedBody& ordered, ParsedRequest* out) {
  SamplingOptions& s = out->sampling;
  TANDEM_ASSIGN_OR_RETURN(auto temperature,
                          r.Number("temperature", 0.0, kMaxTemperature));
  if (temperature) s.temperature = static_cast<float>(*temperature);
  TANDEM_ASSIGN_OR_RETURN(auto top_p, r.Number("top_p", 0.0, 1.0));
  if (top_p) {
    if (*top_p <= 0.0)
      return InvalidParam("top_p", "'top_p' must be in (0, 1], got 0");
    s.top_p = static_cast<float>(*top_p);
  }
  TANDEM_ASSIGN_OR_RETURN(auto top_k, r.Int("top_k", -1, kInt32Max));
  if (top_k) s.top_k = static_cast<int32_t>(*top_k);
  TANDEM_ASSIGN_OR_RETURN(auto min_p, r.Number("min_p", 0.0, 1.0));
  if (min_p) s.min_p = static_cast<float>(*min_p);
  TANDEM_ASSIGN_OR_RETURN(
      auto presence, r.Number("presence_penalty", -kMaxPenalty, kMaxPenalty));
  if (presence) s.presence_penalty = static_cast<float>(*presence);
  TANDEM_ASSIGN_OR_RETURN(
      auto frequency, r.Number("frequency_penalty", -kMaxPenalty, kMaxPenalty));
  if (frequency) s.frequency_penalty = static_cast<float>(*frequency);
  TANDEM_ASSIGN_OR_RETURN(auto repetition, r.Number("repetition_penalty", 0.0,
                                                    kMaxRepetitionPenalty));
  if (repetition) {
    if (*repetition <= 0.0) {
      return InvalidParam("repetition_penalty",
                          "'repetition_penalty' must be > 0");
    }
    s.repetition_penalty = static_cast<float>(*repetition);
  }
  TANDEM_ASSIGN_OR_RETURN(auto seed, r.Bits64("seed"));
  if (seed) s.seed = *seed;

  TANDEM_ASSIGN_OR_RETURN(auto stop, r.StringOrList("stop"));
  if (stop) {
    s.stop.clear();
    for (auto& str : *stop) {
      if (!str.empty()) s.stop.push_back(std::move(str));
    }
    if (static_cast<int64_t>(s.stop.size()) > options.max_stop_sequences) {
      return InvalidParam(
          "stop",
          absl::StrCat("At most ", options.max_stop_sequences,
                       " stop sequences are allowed, got ", s.stop.size()));
    }
  }
  TANDEM_ASSIGN_OR_RETURN(auto include_stop,
                          r.Bool("include_stop_str_in_output"));
  if (include_stop) s.include_stop_str_in_output = *include_stop;
  TANDEM_ASSIGN_OR_RETURN(
      auto stop_ids, r.IntList("stop_token_ids", 0,
                               std::max<int64_t>(options.vocab_size - 1, 0)));
  if (stop_ids) {
    s.stop_token_ids.assign(stop_ids->begin(), stop_ids->end());
  }
  TANDEM_ASSIGN_OR_RETURN(auto ignore_eos, r.Bool("ignore_eos"));
  if (ignore_eos) s.ignore_eos = *ignore_eos;
  TANDEM_ASSIGN_OR_RETURN(auto skip_special, r.Bool("skip_special_tokens"));
  if (skip_special) s.skip_special_tokens = *skip_special;
  TANDEM_ASSIGN_OR_RETURN(auto min_tokens, r.Int("min_tokens", 0, kInt64Max));
  if (min_tokens) s.min_tokens = *min_tokens;
  TANDEM_RETURN_IF_ERROR(ParseLogitBias(r, options, &s));
  TANDEM_ASSIGN_OR_RETURN(auto as_ids, r.Bool("return_tokens_as_token_ids"));
  out->return_tokens_as_token_ids = as_ids.value_or(false);
  TANDEM_RETURN_IF_ERROR(ParseStructuredOutputs(r, ordered, &s));
  return absl::OkStatus();
}

absl::Status ValidateSamplingOptions(const SamplingOptions& s,
                                     const ParseOptions& options) {
  TANDEM_RETURN_IF_ERROR(
      CheckRange("temperature", s.temperature, 0.0, kMaxTemperature));
  TANDEM_RETURN_IF_ERROR(CheckRange("top_p", s.top_p, 0.0, 1.0));
  if (s.top_p <= 0.0f)
    return InvalidParam("top_p", "'top_p' must be in (0, 1], got 0");
  TANDEM_RETURN_IF_ERROR(CheckIntRange("top_k", s.top_k, -1, kInt32Max));
  TANDEM_RETURN_IF_ERROR(CheckRange("min_p", s.min_p, 0.0, 1.0));
  TANDEM_RETURN_IF_ERROR(CheckRange("presence_penalty", s.presence_penalty,
                                    -kMaxPenalty, kMaxPenalty));
  TANDEM_RETURN_IF_ERROR(CheckRange("frequency_penalty", s.frequency_penalty,
                                    -kMaxPenalty, kMaxPenalty));
  TANDEM_RETURN_IF_ERROR(CheckRange("repetition_penalty", s.repetition_penalty,
                                    0.0, kMaxRepetitionPenalty));
  if (s.repetition_penalty <= 0.0f) {
    return InvalidParam("repetition_penalty",
                        "'repetition_penalty' must be > 0");
  }
  if (static_cast<int64_t>(s.stop.size()) > options.max_stop_sequences) {
    return InvalidParam(
        "stop",
        absl::StrCat("At most ", options.max_stop_sequences,
                     " stop sequences are allowed, got ", s.stop.size()));
  }
  for (const std::string& stop : s.stop) {
    if (stop.empty())
      return InvalidParam("stop", "Stop strings must not be empty");
  }
  for (size_t i = 0; i < s.stop_token_ids.size(); ++i) {
    TANDEM_RETURN_IF_ERROR(CheckIntRange(
        absl::StrCat("stop_token_ids[", i, "]"), s.stop_token_ids[i], 0,
        std::max<int64_t>(options.vocab_size - 1, 0)));
  }
  TANDEM_RETURN_IF_ERROR(
      CheckIntRange("min_tokens", s.min_tokens, 0, kInt64Max));
  for (const auto& [id, bias] : s.logit_bias) {
    TANDEM_RETURN_IF_ERROR(CheckLogitBiasId(id, options));
    TANDEM_RETURN_IF_ERROR(CheckRange(absl::StrCat("logit_bias.", id), bias,
                                      -kMaxLogitBias, kMaxLogitBias));
  }
  TANDEM_RETURN_IF_ERROR(
      CheckIntRange("logprobs", s.logprobs, -1, options.max_logprobs));
  TANDEM_RETURN_IF_ERROR(CheckIntRange("prompt_logprobs", s.prompt_logprobs, -1,
                                       options.max_logprobs));
  return absl::OkStatus();
}

absl::Status ResolveMaxTokens(std::optional<int64_t> requested,
                              std::optional<int64_t> default_max,
                              std::string_view prompt_param,
                              std::string_view max_tokens_param,
                              const ParseOptions& options, ParsedRequest* out) {
  const int64_t ctx = options.max_context;
  for (PromptInput& p : out->prompts) {
    const int64_t len = static_cast<int64_t>(p.ids.size());
    if (len >= ctx) {
      return ContextLengthExceeded(
          prompt_param,
          absl::StrCat("This model's maximum context length is ", ctx,
                       " tokens. However, your prompt is ", len,
                       " tokens, which leaves no room for a completion. Please "
                       "reduce the "
                       "length of the prompt."));
    }
    if (requested.has_value()) {
      if (*requested > ctx - len) {
        return ContextLengthExceeded(
            max_tokens_param,
            absl::StrCat("This model's maximum context length is ", ctx,
                         " tokens. However, you requested ", len + *requested,
                         " tokens (", len, " in the prompt, ", *requested,
                         " in the completion). Please reduce the length of the "
                         "prompt or "
                         "completion."));
      }
      p.max_tokens = *requested;
    } else {
      p.max_tokens = default_max.has_value() ? std::min(*default_max, ctx - len)
                                             : ctx - len;
    }
  }
  if (out->sampling.min_tokens > 0) {
    for (const PromptInput& p : out->prompts) {
      if (out->sampling.min_tokens > p.max_tokens) {
        return InvalidParam(
            "min_tokens",
            absl::StrCat("'min_tokens' (", out->sampling.min_tokens,
                         ") must not exceed max_tokens (", p.max_tokens, ")"));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<GenerationRequest> ToGenerationRequests(
    const ParsedRequest& parsed, std::string_view request_id,
    std::chrono::steady_clock::time_point arrival) {
  std::vector<GenerationRequest> out;
  out.reserve(parsed.prompts.size());
  for (size_t i = 0; i < parsed.prompts.size(); ++i) {
    GenerationRequest g;
    g.request_id = absl::StrCat(std::string(request_id), "-", i);
    g.prompt_ids = parsed.prompts[i].ids;
    g.sampling = parsed.sampling;
    g.sampling.max_tokens = parsed.prompts[i].max_tokens;
    g.arrival_time = arrival;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace tandem::frontend
