// Splits a chat answer into its reasoning and its content, as vLLM's
// `--reasoning-parser` does, for the `reasoning_content` field of
// /v1/chat/completions (whole, and as SSE deltas):
//   qwen3        the answer opens as content; a "<think>" at its start opens
//                the reasoning (Qwen3 writes it; with enable_thinking false
//                the template has closed it, and all is content).
//   deepseek_r1  the answer opens as reasoning (the template wrote "<think>";
//                a "<think>" the model writes again is dropped too).
// In both, "</think>" ends the reasoning and everything after it is content;
// the tags themselves are in neither. The split is computed on the streamed
// text, holding back a possible partial tag at the end of a piece, so a
// stream's deltas add up to exactly what the non-streaming answer holds (an
// answer cut before "</think>" is all reasoning in both).
#ifndef TANDEM_COORDINATOR_FRONTEND_REASONING_SPLITTER_H_
#define TANDEM_COORDINATOR_FRONTEND_REASONING_SPLITTER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::frontend {

enum class ReasoningParser { kNone, kQwen3, kDeepSeekR1 };

// "" (none), "qwen3", "deepseek_r1"; InvalidArgument otherwise.
absl::StatusOr<ReasoningParser> ParseReasoningParser(std::string_view name);

struct ReasoningPiece {
  std::string reasoning, content;
};

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(ReasoningParser parser);

  // What `text`, the answer's next piece, adds to either part.
  ReasoningPiece Push(std::string_view text);
  // The end of the answer: what was held back.
  ReasoningPiece Flush();

 private:
  enum class State { kStart, kReasoning, kContent };
  void Emit(std::string_view text, ReasoningPiece* out) const;

  State state_;
  bool deepseek_ = false;
  std::string held_;  // text that may still become a tag
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_REASONING_SPLITTER_H_
