#include "coordinator/frontend/reasoning_splitter.h"

#include "absl/strings/str_cat.h"
#include "coordinator/frontend/partial_tag.h"

namespace tandem::frontend {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

absl::StatusOr<ReasoningParser> ParseReasoningParser(std::string_view name) {
  if (name.empty()) return ReasoningParser::kNone;
  if (name == "qwen3") return ReasoningParser::kQwen3;
  if (name == "deepseek_r1") return ReasoningParser::kDeepSeekR1;
  return absl::InvalidArgumentError(absl::StrCat(
      "--reasoning-parser must be qwen3 or deepseek_r1, got '", std::string(name), "'"));
}

// DeepSeek-R1's template opened the reasoning; its start state still drops a
// "<think>" the model writes again.
ReasoningSplitter::ReasoningSplitter(ReasoningParser parser)
    : state_(parser == ReasoningParser::kNone ? State::kContent : State::kStart),
      deepseek_(parser == ReasoningParser::kDeepSeekR1) {}

void ReasoningSplitter::Emit(std::string_view text, ReasoningPiece* out) const {
  (state_ == State::kContent ? out->content : out->reasoning) += text;
}

ReasoningPiece ReasoningSplitter::Push(std::string_view text) {
  ReasoningPiece out;
  std::string buf = held_;
  buf += text;
  held_.clear();
  std::string_view rest = buf;
  while (!rest.empty()) {
    if (state_ == State::kContent) {
      out.content += rest;
      return out;
    }
    if (state_ == State::kStart) {
      // A "<think>" opening the answer (whitespace before it allowed).
      const size_t lead = rest.find_first_not_of(" \t\r\n");
      if (lead == std::string_view::npos) {  // only whitespace so far: wait
        held_ = std::string(rest);
        return out;
      }
      const std::string_view after = rest.substr(lead);
      if (after.substr(0, kOpen.size()) == kOpen) {
        state_ = State::kReasoning;
        rest = after.substr(kOpen.size());
        continue;
      }
      if (after.size() < kOpen.size() && kOpen.substr(0, after.size()) == after) {
        held_ = std::string(rest);  // may still become "<think>"
        return out;
      }
      state_ = deepseek_ ? State::kReasoning : State::kContent;
      continue;
    }
    // Reasoning: up to "</think>".
    const size_t close = rest.find(kClose);
    if (close != std::string_view::npos) {
      out.reasoning += rest.substr(0, close);
      state_ = State::kContent;
      rest = rest.substr(close + kClose.size());
      continue;
    }
    const size_t keep = PartialTagSuffix(rest, kClose);
    out.reasoning += rest.substr(0, rest.size() - keep);
    held_ = std::string(rest.substr(rest.size() - keep));
    return out;
  }
  return out;
}

ReasoningPiece ReasoningSplitter::Flush() {
  ReasoningPiece out;
  if (state_ == State::kStart) state_ = deepseek_ ? State::kReasoning : State::kContent;
  Emit(held_, &out);
  held_.clear();
  return out;
}

}  // namespace tandem::frontend
