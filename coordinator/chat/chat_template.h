// Chat templates: the Jinja2 text a model ships in tokenizer_config.json
// "chat_template" or GGUF `tokenizer.chat_template`, rendered in C++ the way
// transformers' apply_chat_template renders it (jinja2 3.1,
// ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on).
//
// Only a subset of Jinja is implemented: what Hugging Face chat templates use.
// See coordinator/chat/README.md for what is and is not supported.
#ifndef TANDEM_COORDINATOR_CHAT_CHAT_TEMPLATE_H_
#define TANDEM_COORDINATOR_CHAT_CHAT_TEMPLATE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem {

namespace jinja {
struct Template;
}  // namespace jinja

struct ChatMessage {
  std::string role;
  std::string content;
  // Other fields of the message (tool_calls, name, tool_call_id,
  // reasoning_content, ...), in request order (tojson output depends on key
  // order). The message the template sees is {"role", "content", ...extra}; if
  // extra has a "content" (null, a list of parts, or a string that came after
  // other keys in the request) it replaces `content`, at extra's position.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// Bounds on one render. A template that exceeds one fails with InvalidArgument.
struct ChatTemplateLimits {
  size_t max_output_bytes = 32u << 20;  // the rendered text, and any one string
  int64_t max_steps = 20'000'000;       // expression and statement evaluations
  int max_call_depth = 100;             // nested macro calls
  size_t max_stack_bytes = 1u << 20;    // machine stack the evaluation may use
  size_t max_total_string_bytes = 256u << 20;  // all strings built, in total
  int64_t max_container_nodes = 1'000'000;     // elements of any one list/dict
};

// What apply_chat_template passes to the template.
struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = false;
  // Special tokens, as transformers passes tokenizer.special_tokens_map: only
  // the ones that are set become variables.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> sep_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> cls_token;
  std::optional<std::string> mask_token;
  // JSON tool schemas (a list), or null/absent for no tools.
  nlohmann::ordered_json tools;
  // Documents for RAG templates (a list), or null/absent.
  nlohmann::ordered_json documents;
  // Extra keyword arguments (e.g. {"enable_thinking": false}); they override
  // everything above.
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();
};

// The variables transformers' apply_chat_template gives the template:
// messages (keys whose value is null dropped; reasoning_content / thinking /
// reasoning aliased as transformers does), tools, documents,
// add_generation_prompt, the special tokens and the extra kwargs.
nlohmann::ordered_json BuildChatContext(const ChatTemplateInputs& inputs);

class ChatTemplate {
 public:
  // Parses once; syntax errors are InvalidArgument with line and column. Like
  // jinja2, an unknown filter or test is a syntax error unless it sits inside
  // an `if` (then it fails only when evaluated).
  static absl::StatusOr<ChatTemplate> Parse(std::string source);

  // Renders with `context` as the template's variables (an object: messages,
  // add_generation_prompt, bos_token, eos_token, tools, extra kwargs such as
  // enable_thinking). Runtime errors — raise_exception(...), using an undefined
  // value where jinja2 raises, type errors, exceeded limits — are
  // InvalidArgument with the message and template position. Never throws.
  // Prefer the ordered_json overload: nlohmann::json sorts object keys, which
  // changes what `tojson` prints for tool schemas.
  absl::StatusOr<std::string> Render(const nlohmann::json& context) const;
  absl::StatusOr<std::string> Render(
      const nlohmann::ordered_json& context) const;
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const ChatTemplateLimits& limits) const;

  // BuildChatContext + Render.
  absl::StatusOr<std::string> Apply(const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, std::shared_ptr<const jinja::Template> tmpl)
      : source_(std::move(source)), tmpl_(std::move(tmpl)) {}

  std::string source_;
  std::shared_ptr<const jinja::Template> tmpl_;
};

}  // namespace tandem

#endif  // TANDEM_COORDINATOR_CHAT_CHAT_TEMPLATE_H_
