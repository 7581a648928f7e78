#include "coordinator/frontend/testing/fake_text_processor.h"

namespace tandem::frontend::testing {

absl::StatusOr<std::vector<int32_t>> FakeTextProcessor::Encode(
    std::string_view text, bool add_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (add_special) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

absl::StatusOr<std::string> FakeTextProcessor::Decode(
    const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += TokenText(id);
  return out;
}

std::string FakeTextProcessor::TokenText(int32_t id) const {
  if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
  switch (id) {
    case kBos:
      return "<bos>";
    case kEos:
      return "<eos>";
    case 258:
      return "<pad>";
    case 259:
      return "<unk>";
    default:
      return "";
  }
}

absl::StatusOr<std::string> FakeTextProcessor::ApplyChatTemplate(
    const nlohmann::json& messages, const ChatTemplateOptions& options) const {
  if (options.kwargs.is_object()) {
    auto it = options.kwargs.find("fail");
    if (it != options.kwargs.end() && it->is_boolean() && it->get<bool>()) {
      return absl::InvalidArgumentError(
          "Conversation roles must alternate user/assistant");
    }
  }
  std::string out;
  for (const auto& m : messages) {
    out += "<|" + m["role"].get<std::string>() + "|>\n";
    if (m["content"].is_string()) out += m["content"].get<std::string>();
    out += "\n";
  }
  if (options.tools.is_array())
    out += "<|tools|>" + std::to_string(options.tools.size()) + "\n";
  if (options.add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

}  // namespace tandem::frontend::testing
