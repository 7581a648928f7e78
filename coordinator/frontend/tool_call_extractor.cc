#include "coordinator/frontend/tool_call_extractor.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/frontend/partial_tag.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string_view TrimSpace(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string NewCallId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("chatcmpl-tool-%016x%016x", rng(), rng());
}

// The calls of the <tool_call> blocks in `text` (text outside them is
// dropped, as vLLM's parser drops it); false if a block is not a call.
bool ParseCalls(std::string_view text, std::vector<ToolCall>* calls) {
  for (size_t open = text.find(kOpen); open != std::string_view::npos; open = text.find(kOpen)) {
    text = text.substr(open + kOpen.size());
    const size_t close = text.find(kClose);
    const std::string_view body = TrimSpace(text.substr(0, close));
    text =
        close == std::string_view::npos ? std::string_view() : text.substr(close + kClose.size());
    const nlohmann::json j =
        nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    ToolCall call;
    call.id = NewCallId();
    call.name = j["name"].get<std::string>();
    const auto args = j.find("arguments");
    if (args == j.end()) {
      call.arguments = "{}";
    } else if (args->is_string()) {
      call.arguments = args->get<std::string>();
    } else {
      call.arguments =
          args->dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
    }
    calls->push_back(std::move(call));
  }
  return !calls->empty();
}

}  // namespace

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

absl::StatusOr<ToolCallParser> ParseToolCallParser(std::string_view name) {
  if (name.empty()) return ToolCallParser::kNone;
  if (name == "hermes") return ToolCallParser::kHermes;
  return absl::InvalidArgumentError(
      absl::StrCat("--tool-call-parser must be hermes, got '", std::string(name), "'"));
}

std::string ToolCallExtractor::Push(std::string_view content) {
  if (parser_ == ToolCallParser::kNone) return std::string(content);
  if (in_calls_) {
    held_ += content;
    return "";
  }
  std::string buf = held_;
  buf += content;
  held_.clear();
  const size_t open = buf.find(kOpen);
  if (open != std::string::npos) {
    in_calls_ = true;
    held_ = buf.substr(open);
    return buf.substr(0, open);
  }
  const size_t keep = PartialTagSuffix(buf, kOpen);
  held_ = buf.substr(buf.size() - keep);
  buf.resize(buf.size() - keep);
  return buf;
}

std::string ToolCallExtractor::Finish(std::vector<ToolCall>* calls) {
  calls->clear();
  std::string rest = std::move(held_);
  held_.clear();
  if (!in_calls_) return rest;
  if (ParseCalls(rest, calls)) return "";
  calls->clear();
  return rest;  // not calls after all: content, as generated
}

}  // namespace tandem::frontend
