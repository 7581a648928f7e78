#include "coordinator/frontend/tool_call_formats.h"

#include <random>

#include "absl/strings/str_format.h"
#include "coordinator/frontend/forced_call_stream.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {
namespace {

using ojson = nlohmann::ordered_json;  // keeps the model's key order in arguments

std::string_view TrimSpace(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::mt19937_64& Rng() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng;
}

// Mistral's templates and mistral-common refuse a tool_call_id that is not
// nine alphanumerics, so the ids a client sends back must be of that form.
std::string MistralCallId() {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(9, ' ');
  for (char& c : id) c = kAlnum[Rng()() % (sizeof(kAlnum) - 1)];
  return id;
}

}  // namespace

std::string OpenAiCallId() { return absl::StrFormat("chatcmpl-tool-%016x%016x", Rng()(), Rng()()); }

namespace {

ojson ParseJson(std::string_view text) {
  return ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string DumpJson(const ojson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, ojson::error_handler_t::replace);
}

// A call object: a string "name" and "arguments" (or Llama's "parameters"):
// an object, or a string that already holds the JSON text; absent: "{}".
bool CallFromObject(const ojson& j, std::string id, std::vector<ToolCall>* calls) {
  if (!j.is_object()) return false;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ToolCall call;
  call.id = std::move(id);
  call.name = name->get<std::string>();
  if (args == j.end()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else {
    call.arguments = DumpJson(*args);
  }
  calls->push_back(std::move(call));
  return true;
}

// Before tokenizer v11: one JSON list of call objects after the marker
// (text after the list is dropped, as vLLM's raw_decode drops it). A single
// object is taken as a list of one.
bool ParseMistralList(std::string_view body, std::vector<ToolCall>* calls) {
  const size_t end = JsonContainerEnd(body, 0);
  if (end == std::string_view::npos) return false;
  const ojson j = ParseJson(body.substr(0, end));
  if (j.is_object()) return CallFromObject(j, MistralCallId(), calls);
  if (!j.is_array() || j.empty()) return false;
  for (const ojson& c : j) {
    if (!CallFromObject(c, MistralCallId(), calls)) return false;
  }
  return true;
}

// Tokenizer v11 and later: "name[ARGS]{...}" after each marker (v13 puts
// "[CALL_ID]id" between the name and [ARGS]). As in vLLM, arguments that do
// not parse are still a call, so the model sees in the next turn that it
// tried one; a piece without "{" is skipped.
bool ParseMistralNamed(std::string_view text, std::vector<ToolCall>* calls) {
  while (!text.empty()) {
    size_t next = text.find(kMistralToolCalls);
    std::string_view piece = text.substr(0, next);
    text = next == std::string_view::npos ? std::string_view()
                                          : text.substr(next + kMistralToolCalls.size());
    const size_t brace = piece.find('{');
    if (brace == std::string_view::npos) continue;
    std::string_view name = piece.substr(0, brace);
    for (std::string_view tag : {std::string_view("[CALL_ID]"), std::string_view("[ARGS]")}) {
      name = name.substr(0, name.find(tag));
    }
    name = TrimSpace(name);
    if (name.empty()) continue;
    std::string_view args = TrimSpace(piece.substr(brace));
    const size_t end = JsonContainerEnd(args, 0);
    if (end != std::string_view::npos && !ParseJson(args.substr(0, end)).is_discarded()) {
      args = args.substr(0, end);  // text the model wrote after the object is dropped
    }
    calls->push_back({MistralCallId(), std::string(name), std::string(args)});
  }
  return !calls->empty();
}

}  // namespace

size_t JsonContainerEnd(std::string_view text, size_t begin) {
  if (begin >= text.size() || (text[begin] != '{' && text[begin] != '[')) {
    return std::string_view::npos;
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// Each <tool_call> block (the last may be cut off before </tool_call>, as
// vLLM's regex allows) holds one call object; text outside the blocks is
// dropped.
bool ParseHermesCalls(std::string_view text, std::vector<ToolCall>* calls) {
  for (size_t open = text.find(kHermesOpen); open != std::string_view::npos;
       open = text.find(kHermesOpen)) {
    text = text.substr(open + kHermesOpen.size());
    const size_t close = text.find(kHermesClose);
    const std::string_view body = TrimSpace(text.substr(0, close));
    text = close == std::string_view::npos ? std::string_view()
                                           : text.substr(close + kHermesClose.size());
    if (!CallFromObject(ParseJson(body), OpenAiCallId(), calls)) return false;
  }
  return !calls->empty();
}

bool ParseMistralCalls(std::string_view text, std::vector<ToolCall>* calls) {
  if (text.substr(0, kMistralToolCalls.size()) != kMistralToolCalls) return false;
  text.remove_prefix(kMistralToolCalls.size());
  // The two generations are told apart by what follows the first marker: a
  // JSON list (or object) before v11, a function name after.
  const std::string_view body = TrimSpace(text);
  if (!body.empty() && (body[0] == '[' || body[0] == '{')) {
    // A second marker means neither format: vLLM fails such a request.
    if (body.find(kMistralToolCalls) != std::string_view::npos) return false;
    return ParseMistralList(body, calls);
  }
  return ParseMistralNamed(text, calls);
}

// Call objects separated by ";" (Llama 3.2's parallel calls), after an
// optional <|python_tag|>. Text after the last object is dropped; any other
// object, or no object at all, makes the answer content.
bool ParseLlamaJsonCalls(std::string_view text, std::vector<ToolCall>* calls) {
  text = TrimSpace(text);
  if (text.substr(0, kLlamaPythonTag.size()) == kLlamaPythonTag) {
    text.remove_prefix(kLlamaPythonTag.size());
  }
  size_t pos = 0;
  while (true) {
    pos = text.find_first_not_of(" \t\r\n;", pos);
    if (pos == std::string_view::npos || text[pos] != '{') break;
    const size_t end = JsonContainerEnd(text, pos);
    if (end == std::string_view::npos) return false;
    if (!CallFromObject(ParseJson(text.substr(pos, end - pos)), OpenAiCallId(), calls)) {
      return false;
    }
    pos = end;
  }
  return !calls->empty();
}

// Read as a stream reads it, so that the arguments are the text a streamed
// answer's pieces add up to; each must be JSON.
bool ParseForcedCalls(std::string_view text, std::vector<ToolCall>* calls) {
  ForcedCallStream stream;
  std::vector<ToolCallDelta> pieces;
  stream.Push(text, &pieces);
  if (!stream.complete() || stream.calls().empty()) return false;  // cut off by max_tokens
  for (const ToolCall& c : stream.calls()) {
    if (ParseJson(c.arguments).is_discarded()) return false;
  }
  calls->insert(calls->end(), stream.calls().begin(), stream.calls().end());
  return true;
}

}  // namespace tandem::frontend
