#include "coordinator/frontend/forced_call_stream.h"

#include <utility>

#include "nlohmann/json.hpp"

namespace tandem::frontend {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Where a last UTF-8 character that is not whole yet starts in `s`
// (s.size() when it ends whole): pieces are sent whole characters, each a
// JSON string of its own.
size_t WholeCharsEnd(const std::string& s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? s.size() - back : s.size();
  }
  return s.size();
}

}  // namespace

void ForcedCallStream::Push(std::string_view text, std::vector<ToolCallDelta>* out) {
  for (char c : text) {
    if (phase_ == Phase::kFailed) return;
    Step(c, out);
  }
  if (!calls_.empty() && (phase_ != Phase::kInList && phase_ != Phase::kDone)) {
    Flush(out, /*whole=*/false);
  }
}

void ForcedCallStream::Flush(std::vector<ToolCallDelta>* out, bool whole) {
  ToolCall& call = calls_.back();
  if (!named_) return;  // arguments wait for the name
  const size_t end = whole ? call.arguments.size() : WholeCharsEnd(call.arguments);
  if (announced_ && sent_ >= end) return;
  ToolCallDelta d;
  d.index = static_cast<int>(calls_.size()) - 1;
  if (!announced_) {
    d.id = call.id;
    d.name = call.name;
    announced_ = true;
  }
  d.arguments = call.arguments.substr(sent_, end - sent_);
  sent_ = end;
  out->push_back(std::move(d));
  ++pieces_;
}

void ForcedCallStream::EndValue() {
  phase_ = Phase::kInCall;
  depth_ = 0;
  scalar_ = false;
}

void ForcedCallStream::Step(char c, std::vector<ToolCallDelta>* out) {
  // In a string: only its end matters, and the bytes are kept as written.
  if (in_string_) {
    if (phase_ == Phase::kKey || phase_ == Phase::kName) token_ += c;
    if (phase_ == Phase::kArgs) calls_.back().arguments += c;
    if (escaped_) {
      escaped_ = false;
      return;
    }
    if (c == '\\') {
      escaped_ = true;
      return;
    }
    if (c != '"') return;
    in_string_ = false;
    if (phase_ == Phase::kKey) {
      key_ = std::move(token_);
      phase_ = Phase::kColon;
    } else if (phase_ == Phase::kName) {
      const nlohmann::json name =
          nlohmann::json::parse(token_, nullptr, /*allow_exceptions=*/false);
      if (!name.is_string()) {
        phase_ = Phase::kFailed;
        return;
      }
      calls_.back().name = name.get<std::string>();
      named_ = true;
      phase_ = Phase::kInCall;
    } else if (depth_ == 0) {  // a string value, whole
      EndValue();
    }
    return;
  }
  if (IsSpace(c)) return;  // between tokens: dropped
  switch (phase_) {
    case Phase::kStart:
      phase_ = c == '[' ? Phase::kInList : Phase::kFailed;
      return;
    case Phase::kInList:
      if (c == '{') {
        ToolCall call;
        call.id = OpenAiCallId();
        calls_.push_back(std::move(call));
        named_ = announced_ = had_args_ = false;
        sent_ = 0;
        phase_ = Phase::kInCall;
      } else if (c == ']') {
        phase_ = Phase::kDone;
      } else if (c != ',') {
        phase_ = Phase::kFailed;
      }
      return;
    case Phase::kInCall:
      if (c == '"') {
        token_ = "\"";
        in_string_ = true;
        phase_ = Phase::kKey;
      } else if (c == '}') {
        if (!named_) {
          phase_ = Phase::kFailed;
          return;
        }
        if (!had_args_) calls_.back().arguments = "{}";
        Flush(out, /*whole=*/true);
        phase_ = Phase::kInList;
      } else if (c != ',') {
        phase_ = Phase::kFailed;
      }
      return;
    case Phase::kColon:
      phase_ = c == ':' ? Phase::kValue : Phase::kFailed;
      return;
    case Phase::kValue:
      if (key_ == "\"name\"") {
        if (c != '"') {
          phase_ = Phase::kFailed;
          return;
        }
        token_ = "\"";
        in_string_ = true;
        phase_ = Phase::kName;
        return;
      }
      phase_ = key_ == "\"parameters\"" ? Phase::kArgs : Phase::kSkip;
      if (phase_ == Phase::kArgs) {
        had_args_ = true;
        calls_.back().arguments.clear();
        calls_.back().arguments += c;
      }
      if (c == '{' || c == '[') {
        depth_ = 1;
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '}' || c == ']' || c == ',' || c == ':') {
        phase_ = Phase::kFailed;
      } else {
        scalar_ = true;  // a number or a literal: it ends where the call goes on
      }
      return;
    case Phase::kArgs:
    case Phase::kSkip:
      if (scalar_) {
        if (c == ',' || c == '}') {
          EndValue();
          Step(c, out);  // the call's own ',' or '}'
          return;
        }
        if (phase_ == Phase::kArgs) calls_.back().arguments += c;
        return;
      }
      if (phase_ == Phase::kArgs) calls_.back().arguments += c;
      if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if (c == '}' || c == ']') {
        if (--depth_ == 0) EndValue();
      }
      return;
    case Phase::kDone:
      phase_ = Phase::kFailed;  // nothing but whitespace after the list
      return;
    case Phase::kKey:
    case Phase::kName:
    case Phase::kFailed:
      return;
  }
}

}  // namespace tandem::frontend
