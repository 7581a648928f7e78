#include "coordinator/text/tokenizer_text_processor.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer_parts.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<TokenizerTextProcessor>> TokenizerTextProcessor::Create(
    std::shared_ptr<const Tokenizer> tokenizer, const std::string& chat_template) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("no tokenizer");
  auto p = std::unique_ptr<TokenizerTextProcessor>(new TokenizerTextProcessor());
  const std::string& source = chat_template.empty() ? tokenizer->chat_template() : chat_template;
  if (!source.empty()) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the chat template does not parse: ", t.status().message()));
    }
    p->template_ = std::move(*t);
  }
  if (tokenizer->bos_id() >= 0) p->bos_ = tokenizer->TokenPiece(tokenizer->bos_id());
  if (!tokenizer->eos_ids().empty()) p->eos_ = tokenizer->TokenPiece(tokenizer->eos_ids()[0]);
  p->tokenizer_ = std::move(tokenizer);
  return p;
}

absl::StatusOr<std::vector<int32_t>> TokenizerTextProcessor::Encode(std::string_view text,
                                                                    bool add_special) const {
  return tokenizer_->Encode(text, /*add_bos=*/add_special, /*parse_special=*/true);
}

absl::StatusOr<std::string> TokenizerTextProcessor::Decode(const std::vector<int32_t>& ids) const {
  TANDEM_RETURN_IF_ERROR(tokenizer_->ValidateIds(ids));
  return tokenizer_->Decode(ids);
}

std::string TokenizerTextProcessor::TokenText(int32_t id) const {
  return std::string(tokenizer_->parts().decoder.TokenBytes(id));
}

absl::StatusOr<std::string> TokenizerTextProcessor::ApplyChatTemplate(
    const nlohmann::json& messages, const frontend::ChatTemplateOptions& options) const {
  if (!template_) {
    return absl::InvalidArgumentError(
        "this model has no chat template; use /v1/completions or start with --chat-template");
  }
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be an array");
  ChatTemplateInputs in;
  for (const auto& m : messages) {
    if (!m.is_object()) return absl::InvalidArgumentError("each message must be an object");
    ChatMessage cm;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return absl::InvalidArgumentError("each message needs a string role");
    }
    cm.role = role->get<std::string>();
    auto content = m.find("content");
    if (content != m.end() && content->is_string()) {
      cm.content = content->get<std::string>();
    } else if (content != m.end()) {  // null or parts: the template sees it as given
      cm.extra["content"] = nlohmann::ordered_json::parse(content->dump(), nullptr, false);
    }
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "role" || it.key() == "content") continue;
      cm.extra[it.key()] = nlohmann::ordered_json::parse(it.value().dump(), nullptr, false);
    }
    in.messages.push_back(std::move(cm));
  }
  in.add_generation_prompt = options.add_generation_prompt;
  in.bos_token = bos_;
  in.eos_token = eos_;
  if (!options.tools.is_null()) {
    in.tools = nlohmann::ordered_json::parse(options.tools.dump(), nullptr, false);
  }
  if (options.kwargs.is_object()) {
    in.extra_kwargs = nlohmann::ordered_json::parse(options.kwargs.dump(), nullptr, false);
  }
  return template_->Apply(in);
}

}  // namespace tandem
