// The tool-call formats of the chat models Tandem serves, as vLLM's
// `--tool-call-parser` names them. Each parser reads the text of an answer
// from its first tool-call marker on (what ToolCallExtractor holds back) and
// returns the calls, or false when that text is not calls after all, in
// which case the extractor gives it back as content.
//
//   hermes       (Hermes, Qwen2.5, Qwen3)
//       <tool_call>{"name": "f", "arguments": {...}}</tool_call> ...
//   mistral      (Mistral-7B-Instruct-v0.3, Mixtral-8x22B-Instruct: before
//                 tokenizer v11)
//       [TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]
//                (Mistral-Small-3.1 and later: tokenizer v11+)
//       [TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}
//   llama3_json  (Llama 3.1-3.3, Llama 4; vLLM also calls it llama4_json)
//       <|python_tag|>{"name": "f", "parameters": {...}}; {"name": "g", ...}
//   forced       (tool_choice "required" or a named function, any model)
//       [{"name": "f", "parameters": {...}}, ...]
#ifndef TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_FORMATS_H_
#define TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_FORMATS_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::frontend {

struct ToolCall {
  std::string id;  // "chatcmpl-tool-<32 hex digits>"; 9 alphanumerics for mistral
  std::string name;
  std::string arguments;  // JSON text
};

inline constexpr std::string_view kHermesOpen = "<tool_call>";
inline constexpr std::string_view kHermesClose = "</tool_call>";
inline constexpr std::string_view kMistralToolCalls = "[TOOL_CALLS]";
inline constexpr std::string_view kLlamaPythonTag = "<|python_tag|>";

// The end (one past the closing bracket) of the JSON object or array that
// starts at text[begin], found by bracket depth outside strings; npos when
// text[begin] opens neither or the value is cut off. Only the extent is
// found here: the caller parses the value.
size_t JsonContainerEnd(std::string_view text, size_t begin);

// `text` starts at the first marker of its format (for llama3_json: at the
// answer's first non-blank character, "{" or <|python_tag|>).
bool ParseHermesCalls(std::string_view text, std::vector<ToolCall>* calls);
bool ParseMistralCalls(std::string_view text, std::vector<ToolCall>* calls);
bool ParseLlamaJsonCalls(std::string_view text, std::vector<ToolCall>* calls);
// tool_choice "required" or a named function: `[{"name", "parameters"}]`,
// read by ForcedCallStream (forced_call_stream.h).
bool ParseForcedCalls(std::string_view text, std::vector<ToolCall>* calls);
// A new call id of OpenAI's form.
std::string OpenAiCallId();

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_TOOL_CALL_FORMATS_H_
