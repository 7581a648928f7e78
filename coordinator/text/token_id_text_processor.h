// The frontend's TextProcessor for a model served without a tokenizer (a
// checkpoint that ships none, like vLLM's --skip-tokenizer-init): prompts are
// token ids, outputs are token ids. Text prompts and chat requests get a
// clear 400; completion text and log-prob token strings are empty, so
// clients ask for `return_tokens_as_token_ids` to read the ids.
#ifndef TANDEM_COORDINATOR_TEXT_TOKEN_ID_TEXT_PROCESSOR_H_
#define TANDEM_COORDINATOR_TEXT_TOKEN_ID_TEXT_PROCESSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/frontend/generation_backend.h"

namespace tandem {

class TokenIdTextProcessor : public frontend::TextProcessor {
 public:
  explicit TokenIdTextProcessor(int64_t vocab_size) : vocab_size_(vocab_size) {}

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
  std::string TokenText(int32_t id) const override { return ""; }
  int64_t vocab_size() const override { return vocab_size_; }
  absl::StatusOr<std::string> ApplyChatTemplate(
      const nlohmann::json& messages, const frontend::ChatTemplateOptions& options) const override;

 private:
  int64_t vocab_size_;
};

}  // namespace tandem

#endif  // TANDEM_COORDINATOR_TEXT_TOKEN_ID_TEXT_PROCESSOR_H_
