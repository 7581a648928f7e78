// POST /v1/chat/completions: messages (text content only), chat template
// options, tools (passed to the template), boolean logprobs + top_logprobs,
// max_completion_tokens.
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/request_parser.h"
#include "coordinator/structured/json_schema.h"

namespace tandem::frontend {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

bool KnownRole(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" ||
         role == "assistant" || role == "tool" || role == "function";
}

// content: a string, a list of parts ({"type":"text","text":…}), or null.
// Returns the text (parts joined with "\n"), or null.
absl::StatusOr<json> NormalizeContent(const json& content,
                                      const std::string& name) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) {
    return WrongType(name, "a string or a list of content parts",
                     JsonTypeName(content));
  }
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    std::string pname = absl::StrCat(name, "[", j, "]");
    if (!part.is_object())
      return WrongType(pname, "an object", JsonTypeName(part));
    FieldReader pr(part, pname + ".");
    TANDEM_ASSIGN_OR_RETURN(auto type, pr.String("type"));
    if (!type.has_value()) return MissingParam(pname + ".type");
    std::string key;
    if (*type == "text") {
      key = "text";
    } else if (*type == "refusal") {
      key = "refusal";
    } else {
      return InvalidParam(
          pname + ".type",
          absl::StrCat("Content part type '", *type,
                       "' is not supported: this model accepts text only"));
    }
    TANDEM_ASSIGN_OR_RETURN(auto t, pr.String(key));
    if (!t.has_value()) return MissingParam(absl::StrCat(pname, ".", key));
    if (!text.empty()) text += "\n";
    text += *t;
  }
  return json(std::move(text));
}

absl::StatusOr<json> NormalizeMessages(const json* messages) {
  if (messages == nullptr) return MissingParam("messages");
  if (!messages->is_array()) {
    return WrongType("messages", "a list of messages", JsonTypeName(*messages));
  }
  if (messages->empty())
    return InvalidParam("messages", "'messages' must not be empty");
  json out = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    std::string name = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(name, "an object", JsonTypeName(m));
    FieldReader mr(m, name + ".");
    TANDEM_ASSIGN_OR_RETURN(auto role, mr.String("role"));
    if (!role.has_value()) return MissingParam(name + ".role");
    if (!KnownRole(*role)) {
      return InvalidParam(name + ".role",
                          absl::StrCat("Unknown role '", *role, "'"));
    }
    json msg = json::object();
    msg["role"] = *role;
    const json* content = mr.Find("content");
    if (content == nullptr) {
      if (*role != "assistant") return MissingParam(name + ".content");
      msg["content"] = nullptr;
    } else {
      TANDEM_ASSIGN_OR_RETURN(msg["content"],
                              NormalizeContent(*content, name + ".content"));
    }
    TANDEM_ASSIGN_OR_RETURN(auto mname, mr.String("name"));
    if (mname) msg["name"] = *mname;
    TANDEM_ASSIGN_OR_RETURN(auto tool_call_id, mr.String("tool_call_id"));
    if (tool_call_id) msg["tool_call_id"] = *tool_call_id;
    TANDEM_ASSIGN_OR_RETURN(auto reasoning, mr.String("reasoning_content"));
    if (reasoning) msg["reasoning_content"] = *reasoning;
    if (const json* calls = mr.Find("tool_calls")) {
      if (!calls->is_array()) {
        return WrongType(name + ".tool_calls", "a list", JsonTypeName(*calls));
      }
      msg["tool_calls"] = *calls;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

absl::StatusOr<ChatTemplateOptions> ParseTemplateOptions(const FieldReader& r,
                                                         const json& messages) {
  ChatTemplateOptions t;
  TANDEM_ASSIGN_OR_RETURN(auto add_gen, r.Bool("add_generation_prompt"));
  TANDEM_ASSIGN_OR_RETURN(auto cont, r.Bool("continue_final_message"));
  t.continue_final_message = cont.value_or(false);
  t.add_generation_prompt = add_gen.value_or(!t.continue_final_message);
  if (t.continue_final_message && t.add_generation_prompt) {
    return InvalidParam(
        "continue_final_message",
        "'continue_final_message' and 'add_generation_prompt' cannot both be "
        "true");
  }
  if (t.continue_final_message && messages.back()["role"] != "assistant") {
    return InvalidParam(
        "continue_final_message",
        "'continue_final_message' needs an assistant message last");
  }
  TANDEM_ASSIGN_OR_RETURN(const json* kwargs, r.Object("chat_template_kwargs"));
  if (kwargs != nullptr) t.kwargs = *kwargs;
  if (r.Find("chat_template") != nullptr) {
    return InvalidParam("chat_template",
                        "Per-request chat templates are not supported");
  }

  const json* tools = r.Find("tools");
  if (tools != nullptr && !tools->is_array()) {
    return WrongType("tools", "a list", JsonTypeName(*tools));
  }
  bool tools_off = false;
  if (const json* choice = r.Find("tool_choice")) {
    if (!choice->is_string() && !choice->is_object()) {
      return WrongType("tool_choice", "a string or an object", JsonTypeName(*choice));
    }
    if (choice->is_string() && *choice != "none" && *choice != "auto" && *choice != "required") {
      return InvalidParam("tool_choice",
                          "tool_choice must be \"none\", \"auto\", \"required\" or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (choice->is_object()) {
      const json* fn = choice->contains("function") ? &(*choice)["function"] : nullptr;
      if (choice->value("type", json()) != "function" || fn == nullptr || !fn->is_object() ||
          !fn->contains("name") || !(*fn)["name"].is_string()) {
        return InvalidParam("tool_choice",
                            "a named tool_choice is {\"type\": \"function\", \"function\": "
                            "{\"name\": \"...\"}}");
      }
    }
    if (*choice != "none" && *choice != "auto" && (tools == nullptr || tools->empty())) {
      return InvalidParam("tool_choice",
                          "tool_choice 'required' or a named function needs 'tools'");
    }
    tools_off = *choice == "none";
  }
  TANDEM_ASSIGN_OR_RETURN(auto parallel, r.Bool("parallel_tool_calls"));
  (void)parallel;
  if (tools != nullptr && !tools->empty() && !tools_off) t.tools = *tools;

  return t;
}

// A tool's "$ref"s ("#/$defs/x") re-pointed at where its parameters sit in
// the schema of the calls ("#/$tools/<i>/$defs/x").
void RebaseRefs(ojson* j, const std::string& base) {
  if (j->is_object()) {
    for (auto& [k, v] : j->items()) {
      if (k == "$ref" && v.is_string() && !v.get<std::string>().empty() &&
          v.get<std::string>()[0] == '#') {
        v = base + v.get<std::string>().substr(1);
      } else {
        RebaseRefs(&v, base);
      }
    }
  } else if (j->is_array()) {
    for (ojson& v : *j) RebaseRefs(&v, base);
  }
}

// tool_choice "required" or a named function: the JSON Schema the answer is
// held to, a list of calls [{"name", "parameters"}] of the tools allowed
// (one call for a named function or parallel_tool_calls false). nullopt for
// "auto", "none" or no tool_choice. A tool whose parameters use a keyword
// the recognizer does not enforce is a 400 naming the tool.
absl::StatusOr<std::optional<ojson>> ForcedToolSchema(const FieldReader& r,
                                                      const OrderedBody& ordered) {
  const json* choice = r.Find("tool_choice");
  if (choice == nullptr || *choice == "auto" || *choice == "none") return std::nullopt;
  const json& tools = *r.Find("tools");  // checked by ParseTemplateOptions
  const std::string named =
      choice->is_object() ? (*choice)["function"]["name"].get<std::string>() : "";
  ojson alternatives = ojson::array();
  ojson bodies = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string param = absl::StrCat("tools[", i, "]");
    const json& tool = tools[i];
    const json* fn = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return InvalidParam(param,
                          "a tool is {\"type\": \"function\", \"function\": "
                          "{\"name\", \"parameters\"}}");
    }
    const std::string name = (*fn)["name"];
    if (!named.empty() && name != named) continue;
    // As written, so that their properties come in the declared order.
    const json* given = fn->contains("parameters") ? &(*fn)["parameters"] : nullptr;
    ojson parameters = given == nullptr || given->is_null()
                           ? ojson({{"type", "object"}})
                           : ordered.At(absl::StrCat("/tools/", i, "/function/parameters"), *given);
    if (auto s = structured::CompiledSchema::Compile(parameters); !s.ok()) {
      return InvalidParam(param + ".function.parameters",
                          absl::StrCat("The parameters of tool '", name,
                                       "' cannot be enforced: ", s.status().message()));
    }
    const std::string at = absl::StrCat("#/$tools/", bodies.size());
    RebaseRefs(&parameters, at);
    bodies.push_back(std::move(parameters));
    // The name first: the model names the tool before it writes the
    // arguments, and a stream can announce the call as soon as it is named.
    alternatives.push_back(
        {{"type", "object"},
         {"properties", {{"name", {{"const", name}}}, {"parameters", {{"$ref", at}}}}},
         {"required", {"name", "parameters"}}});
  }
  if (alternatives.empty()) {
    return InvalidParam("tool_choice", absl::StrCat("no tool named '", named, "' is in 'tools'"));
  }
  TANDEM_ASSIGN_OR_RETURN(auto parallel, r.Bool("parallel_tool_calls"));
  ojson schema = {
      {"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", alternatives}}}, {"$tools", bodies}};
  if (!named.empty() || !parallel.value_or(true)) schema["maxItems"] = 1;
  return schema;
}

}  // namespace

absl::StatusOr<RenderedChat> RenderChatPrompt(const json& body, const TextProcessor& text) {
  if (!body.is_object()) {
    return WrongType("body", "a JSON object", JsonTypeName(body));
  }
  FieldReader r(body);
  TANDEM_ASSIGN_OR_RETURN(json messages, NormalizeMessages(r.Find("messages")));
  TANDEM_ASSIGN_OR_RETURN(ChatTemplateOptions topts, ParseTemplateOptions(r, messages));
  auto rendered = text.ApplyChatTemplate(messages, topts);
  if (!rendered.ok()) {
    absl::Status s = rendered.status();
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      if (!ParamOf(s)) s = WithParam(s, "messages");
      if (!CodeOf(s)) s = WithCode(s, "invalid_value");
    }
    return s;
  }
  RenderedChat out;
  out.text = std::move(*rendered);
  // Tools offered (and tool_choice not "none"): the answer may call them.
  out.tools_offered = topts.tools.is_array() && !topts.tools.empty();
  return out;
}

absl::StatusOr<ParsedRequest> ParseChatRequest(const json& body, const ParseOptions& options,
                                               const TextProcessor& text,
                                               std::string_view body_text) {
  if (!body.is_object()) {
    return WrongType("body", "a JSON object", JsonTypeName(body));
  }
  ParsedRequest out;
  out.endpoint = Endpoint::kChat;
  out.reasoning_parser = options.reasoning_parser;
  out.sampling = options.defaults;
  FieldReader r(body);
  // The messages are checked first, so that their errors come before the
  // other fields' (the prompt is rendered below).
  TANDEM_RETURN_IF_ERROR(NormalizeMessages(r.Find("messages")).status());
  TANDEM_RETURN_IF_ERROR(ParseCommonFields(r, options, &out));
  const OrderedBody ordered(body_text);
  TANDEM_RETURN_IF_ERROR(ParseSamplingFields(r, options, ordered, &out));

  TANDEM_ASSIGN_OR_RETURN(auto logprobs, r.Bool("logprobs"));
  TANDEM_ASSIGN_OR_RETURN(auto top_logprobs,
                          r.Int("top_logprobs", 0, options.max_logprobs));
  out.logprobs = logprobs.value_or(false);
  if (top_logprobs.has_value() && !out.logprobs) {
    return InvalidParam("top_logprobs",
                        "'top_logprobs' requires 'logprobs' to be true");
  }
  if (out.logprobs) {
    out.top_logprobs = static_cast<int32_t>(top_logprobs.value_or(0));
    out.sampling.logprobs = out.top_logprobs;
  }

  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  TANDEM_ASSIGN_OR_RETURN(auto max_completion,
                          r.Int("max_completion_tokens", 1, kMax));
  TANDEM_ASSIGN_OR_RETURN(auto max_tokens, r.Int("max_tokens", 1, kMax));
  std::optional<int64_t> requested =
      max_completion ? max_completion : max_tokens;
  std::string_view max_param =
      max_completion ? "max_completion_tokens" : "max_tokens";

  TANDEM_ASSIGN_OR_RETURN(RenderedChat rendered, RenderChatPrompt(body, text));
  // tool_choice "required" or a named function: the answer is the calls,
  // whatever --tool-call-parser says.
  TANDEM_ASSIGN_OR_RETURN(std::optional<ojson> forced, ForcedToolSchema(r, ordered));
  if (forced.has_value()) {
    if (out.sampling.json_object || out.sampling.json_schema != nullptr) {
      return InvalidParam("tool_choice",
                          "tool_choice \"required\" or a named function cannot be combined with "
                          "response_format, structured_outputs or guided_json/guided_choice");
    }
    auto schema = structured::CompiledSchema::Compile(*forced);
    if (!schema.ok()) return InvalidParam("tools", std::string(schema.status().message()));
    out.sampling.json_schema = *std::move(schema);
    out.tool_call_parser = ToolCallParser::kForced;
    const json* choice = r.Find("tool_choice");
    out.tool_choice_named = choice != nullptr && choice->is_object();
  } else if (rendered.tools_offered) {
    out.tool_call_parser = options.tool_call_parser;
    // Mistral calls start with the special token [TOOL_CALLS]: the answer is
    // decoded with special tokens, whatever skip_special_tokens says (as in
    // vLLM), or the calls could not be told from text.
    if (!ToolCallToken(out.tool_call_parser).empty()) out.sampling.skip_special_tokens = false;
  }
  TANDEM_ASSIGN_OR_RETURN(auto add_special, r.Bool("add_special_tokens"));
  auto ids = text.Encode(rendered.text, add_special.value_or(false));
  if (!ids.ok()) return WithParam(ids.status(), "messages");
  if (ids->empty())
    return InvalidParam("messages", "The rendered prompt is empty");
  PromptInput p;
  p.ids = std::move(*ids);
  p.text = std::move(rendered.text);
  out.prompts.push_back(std::move(p));
  TANDEM_RETURN_IF_ERROR(ResolveMaxTokens(requested, std::nullopt, "messages",
                                          max_param, options, &out));
  return out;
}

}  // namespace tandem::frontend
