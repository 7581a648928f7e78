// The frontend's TextProcessor over the model's tokenizer and chat template:
// encodes prompts, decodes echoes, gives each token's bytes for log-prob
// entries, and renders chat messages with the model's Jinja template.
#ifndef TANDEM_COORDINATOR_TEXT_TOKENIZER_TEXT_PROCESSOR_H_
#define TANDEM_COORDINATOR_TEXT_TOKENIZER_TEXT_PROCESSOR_H_

#include <memory>
#include <optional>
#include <string>

#include "common/tokenizer/tokenizer.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/frontend/generation_backend.h"

namespace tandem {

class TokenizerTextProcessor : public frontend::TextProcessor {
 public:
  // `chat_template` overrides the tokenizer's own (e.g. --chat-template);
  // empty = the model's. A model without any template serves completions
  // only: chat requests get a clear 400.
  static absl::StatusOr<std::unique_ptr<TokenizerTextProcessor>> Create(
      std::shared_ptr<const Tokenizer> tokenizer, const std::string& chat_template = "");

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
  std::string TokenText(int32_t id) const override;
  std::string TokenPiece(int32_t id) const override { return tokenizer_->TokenPiece(id); }
  int64_t vocab_size() const override { return tokenizer_->vocab_size(); }
  absl::StatusOr<std::string> ApplyChatTemplate(
      const nlohmann::json& messages, const frontend::ChatTemplateOptions& options) const override;

 private:
  TokenizerTextProcessor() = default;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> template_;
  std::optional<std::string> bos_, eos_;
};

}  // namespace tandem

#endif  // TANDEM_COORDINATOR_TEXT_TOKENIZER_TEXT_PROCESSOR_H_
