// A byte-level TextProcessor for tests: token id b < 256 is the byte b;
// 256 = <bos>, 257 = <eos>, 258 = <pad>, 259 = <unk>. Encode(add_special)
// prepends <bos>. The chat template renders "<|role|>\ncontent\n" per message
// and "<|assistant|>\n" as the generation prompt; chat_template_kwargs
// {"fail": true} makes it fail (InvalidArgument), as a template's
// raise_exception would.
#ifndef TANDEM_COORDINATOR_FRONTEND_TESTING_FAKE_TEXT_PROCESSOR_H_
#define TANDEM_COORDINATOR_FRONTEND_TESTING_FAKE_TEXT_PROCESSOR_H_

#include <string>
#include <vector>

#include "coordinator/frontend/generation_backend.h"

namespace tandem::frontend::testing {

class FakeTextProcessor : public TextProcessor {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int64_t kVocab = 260;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  absl::StatusOr<std::string> Decode(
      const std::vector<int32_t>& ids) const override;
  std::string TokenText(int32_t id) const override;
  int64_t vocab_size() const override { return kVocab; }
  absl::StatusOr<std::string> ApplyChatTemplate(
      const nlohmann::json& messages,
      const ChatTemplateOptions& options) const override;
};

}  // namespace tandem::frontend::testing

#endif  // TANDEM_COORDINATOR_FRONTEND_TESTING_FAKE_TEXT_PROCESSOR_H_
