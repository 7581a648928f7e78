#include "coordinator/text/token_id_text_processor.h"

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<std::vector<int32_t>> TokenIdTextProcessor::Encode(std::string_view,
                                                                  bool) const {
  return absl::InvalidArgumentError(
      "this model is served without a tokenizer: send the prompt as token ids");
}

absl::StatusOr<std::string> TokenIdTextProcessor::Decode(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary of ", vocab_size_));
    }
  }
  return std::string();  // no text without a tokenizer
}

absl::StatusOr<std::string> TokenIdTextProcessor::ApplyChatTemplate(
    const nlohmann::json&, const frontend::ChatTemplateOptions&) const {
  return absl::InvalidArgumentError(
      "this model is served without a tokenizer, so it has no chat template; use "
      "/v1/completions with token ids");
}

}  // namespace tandem
