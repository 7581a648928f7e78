// Tool calls in a chat answer's content, as vLLM's `--tool-call-parser`
// finds them (the formats are in tool_call_formats.h). The content before
// the first call stays content; the calls become message.tool_calls and the
// finish reason "tool_calls"; text after or between calls is dropped. If the
// calls do not parse, there are none and the whole text is content, as in
// vLLM.
//
// Where calls start: at the first <tool_call> (hermes) or [TOOL_CALLS]
// (mistral) anywhere in the answer; for llama3_json only when the answer
// itself starts (after blanks) with "{" or <|python_tag|>, the way Llama
// answers with a call, so that prose holding JSON stays prose. vLLM applies
// that rule when streaming; here it holds for whole answers too, so the two
// always agree.
//
// Streaming: content is released as it comes up to where calls start (a
// possible partial marker at a piece's end is held back); from there on the
// text is held and the calls are released whole at the end, each in one
// delta (OpenAI clients concatenate argument fragments, so one fragment is
// the whole). Forced calls (kForced), whose shape the answer's schema
// guarantees, stream as they are written instead: each call's id and name
// as soon as it is named, then its arguments piece by piece
// (forced_call_stream.h).
#ifndef TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_EXTRACTOR_H_
#define TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_EXTRACTOR_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/frontend/forced_call_stream.h"
#include "coordinator/frontend/tool_call_formats.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {

// kForced: tool_choice "required" or a named function, whatever the model's
// own format: the answer is held by a JSON Schema to a JSON array of
// {"name", "parameters"} (as vLLM does), and all of it is the calls.
enum class ToolCallParser { kNone, kHermes, kMistral, kLlama3Json, kForced };

// "" (none), "hermes", "mistral", "llama3_json" or "llama4_json" (the same
// parser, as in vLLM); InvalidArgument otherwise.
absl::StatusOr<ToolCallParser> ParseToolCallParser(std::string_view name);

// The special token the model writes to call a tool, when the parser needs
// the answer decoded with special tokens (mistral's [TOOL_CALLS]); "" when
// it does not.
std::string_view ToolCallToken(ToolCallParser parser);

// The OpenAI "tool_calls" list: [{"id", "type": "function", "function":
// {"name", "arguments"}}], with "index" on each when `with_index` (deltas).
nlohmann::ordered_json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index);
// The same for streamed pieces: a call's first piece has its id, type and
// name; the others {"index", "function": {"arguments"}}.
nlohmann::ordered_json ToolCallDeltasJson(const std::vector<ToolCallDelta>& deltas);

class ToolCallExtractor {
 public:
  explicit ToolCallExtractor(ToolCallParser parser) : parser_(parser) {}

  // The content of the answer's next piece that may be released now. With
  // `deltas` (a stream), kForced releases its calls' pieces there as they
  // come; without, they come whole from Finish.
  std::string Push(std::string_view content, std::vector<ToolCallDelta>* deltas = nullptr);
  // The end of the answer: the content still to release; `calls` gets the
  // tool calls not streamed (empty when there are none).
  std::string Finish(std::vector<ToolCall>* calls);
  // The answer was calls, streamed in deltas and whole at the end (the
  // finish reason is then "tool_calls").
  bool streamed_calls() const { return forced_.complete() && forced_.pieces() > 0; }

 private:
  // Where calls start in `buf` (npos if not yet); `*keep` gets the bytes at
  // its end to hold back until the next piece decides.
  size_t CallsStart(std::string_view buf, size_t* keep);

  ToolCallParser parser_;
  ForcedCallStream forced_;  // kForced in a stream
  bool in_calls_ = false;
  bool plain_ = false;  // llama3_json: the answer did not start with a call
  std::string held_;    // a partial marker, or (in_calls_) the calls' text
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_EXTRACTOR_H_
