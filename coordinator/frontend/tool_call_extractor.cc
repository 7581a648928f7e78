#include "coordinator/frontend/tool_call_extractor.h"

#include "absl/strings/str_cat.h"
#include "coordinator/frontend/partial_tag.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {

nlohmann::ordered_json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    nlohmann::ordered_json c;
    if (with_index) c["index"] = i;
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"]["name"] = calls[i].name;
    c["function"]["arguments"] = calls[i].arguments;
    out.push_back(std::move(c));
  }
  return out;
}

nlohmann::ordered_json ToolCallDeltasJson(const std::vector<ToolCallDelta>& deltas) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ToolCallDelta& d : deltas) {
    nlohmann::ordered_json c;
    c["index"] = d.index;
    if (!d.id.empty()) {
      c["id"] = d.id;
      c["type"] = "function";
      c["function"]["name"] = d.name;
    }
    c["function"]["arguments"] = d.arguments;
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<ToolCallParser> ParseToolCallParser(std::string_view name) {
  if (name.empty()) return ToolCallParser::kNone;
  if (name == "hermes") return ToolCallParser::kHermes;
  if (name == "mistral") return ToolCallParser::kMistral;
  if (name == "llama3_json" || name == "llama4_json") return ToolCallParser::kLlama3Json;
  return absl::InvalidArgumentError(
      absl::StrCat("--tool-call-parser must be hermes, mistral, llama3_json or llama4_json, got '",
                   std::string(name), "'"));
}

std::string_view ToolCallToken(ToolCallParser parser) {
  return parser == ToolCallParser::kMistral ? kMistralToolCalls : std::string_view();
}

size_t ToolCallExtractor::CallsStart(std::string_view buf, size_t* keep) {
  *keep = 0;
  if (parser_ == ToolCallParser::kForced) return 0;
  if (parser_ != ToolCallParser::kLlama3Json) {
    const std::string_view marker =
        parser_ == ToolCallParser::kHermes ? kHermesOpen : kMistralToolCalls;
    const size_t at = buf.find(marker);
    if (at == std::string_view::npos) *keep = PartialTagSuffix(buf, marker);
    return at;
  }
  // llama3_json: only an answer that starts with "{" or <|python_tag|> calls.
  const size_t first = buf.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) {
    *keep = buf.size();  // blanks so far: undecided
    return std::string_view::npos;
  }
  const std::string_view rest = buf.substr(first);
  if (rest[0] == '{' || rest.substr(0, kLlamaPythonTag.size()) == kLlamaPythonTag) return 0;
  if (rest.size() < kLlamaPythonTag.size() && kLlamaPythonTag.substr(0, rest.size()) == rest) {
    *keep = buf.size();  // a partial <|python_tag|>: undecided
    return std::string_view::npos;
  }
  plain_ = true;
  return std::string_view::npos;
}

std::string ToolCallExtractor::Push(std::string_view content, std::vector<ToolCallDelta>* deltas) {
  if (parser_ == ToolCallParser::kNone || plain_) return std::string(content);
  if (parser_ == ToolCallParser::kForced && deltas != nullptr) {
    // Kept too, for Finish to give back as content if no call came of it.
    in_calls_ = true;
    held_ += content;
    forced_.Push(content, deltas);
    return "";
  }
  if (in_calls_) {
    held_ += content;
    return "";
  }
  std::string buf = held_;
  buf += content;
  held_.clear();
  size_t keep = 0;
  const size_t start = CallsStart(buf, &keep);
  if (start != std::string::npos) {
    in_calls_ = true;
    held_ = buf.substr(start);
    return buf.substr(0, start);
  }
  held_ = buf.substr(buf.size() - keep);
  buf.resize(buf.size() - keep);
  return buf;
}

std::string ToolCallExtractor::Finish(std::vector<ToolCall>* calls) {
  calls->clear();
  std::string rest = std::move(held_);
  held_.clear();
  if (!in_calls_) return rest;
  // Streamed calls are out already: whole (streamed_calls()), or cut off
  // (by max_tokens; the finish reason says so).
  if (forced_.pieces() > 0) return "";
  bool ok = false;
  switch (parser_) {
    case ToolCallParser::kHermes:
      ok = ParseHermesCalls(rest, calls);
      break;
    case ToolCallParser::kMistral:
      ok = ParseMistralCalls(rest, calls);
      break;
    case ToolCallParser::kLlama3Json:
      ok = ParseLlamaJsonCalls(rest, calls);
      break;
    case ToolCallParser::kForced:
      ok = ParseForcedCalls(rest, calls);
      break;
    case ToolCallParser::kNone:
      break;
  }
  if (ok) return "";
  calls->clear();
  return rest;  // not calls after all: content, as generated
}

}  // namespace tandem::frontend
