// Tool calls in a chat answer's content, as vLLM's `--tool-call-parser
// hermes` finds them (Hermes, Qwen2.5, Qwen3 and others trained on its
// format):
//   Let me look.<tool_call>
//   {"name": "get_weather", "arguments": {"location": "Paris"}}
//   </tool_call>
// Each <tool_call> block (the last may be cut off before </tool_call>) holds
// a JSON object with a string "name" and "arguments" (an object, or a string
// already holding JSON). The content before the first <tool_call> stays
// content; the blocks become message.tool_calls and the finish reason
// "tool_calls"; text after or between blocks is dropped. If any block is not
// such an object, there are no tool calls and the whole text is content, as
// in vLLM.
//
// Streaming: content is released as it comes up to a "<tool_call>" (a
// possible partial tag at a piece's end is held back); from there on the
// text is held and the calls are released whole at the end, each in one
// delta (OpenAI clients concatenate argument fragments, so one fragment is
// the whole).
#ifndef TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_EXTRACTOR_H_
#define TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_EXTRACTOR_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {

enum class ToolCallParser { kNone, kHermes };

// "" (none) or "hermes"; InvalidArgument otherwise.
absl::StatusOr<ToolCallParser> ParseToolCallParser(std::string_view name);

struct ToolCall {
  std::string id;  // "chatcmpl-tool-<32 hex digits>"
  std::string name;
  std::string arguments;  // JSON text
};

// The OpenAI "tool_calls" list: [{"id", "type": "function", "function":
// {"name", "arguments"}}], with "index" on each when `with_index` (deltas).
nlohmann::ordered_json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index);

class ToolCallExtractor {
 public:
  explicit ToolCallExtractor(ToolCallParser parser) : parser_(parser) {}

  // The content of the answer's next piece that may be released now.
  std::string Push(std::string_view content);
  // The end of the answer: the content still to release; `calls` gets the
  // tool calls (empty when there are none).
  std::string Finish(std::vector<ToolCall>* calls);

 private:
  ToolCallParser parser_;
  bool in_calls_ = false;
  std::string held_;  // a partial "<tool_call>", or (in_calls_) the calls' text
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_EXTRACTOR_H_
