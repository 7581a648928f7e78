// Text normalization before pre-tokenization (tokenizer.json "normalizer"):
// NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace (string or regex),
// Strip, Sequence.
#ifndef TANDEM_COMMON_TOKENIZER_NORMALIZER_H_
#define TANDEM_COMMON_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/regex.h"
#include "nlohmann/json.hpp"

namespace tandem::tok {

class Normalizer {
 public:
  // `j` is tokenizer.json's "normalizer" (null: identity).
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(
      const nlohmann::json& j);
  static std::unique_ptr<Normalizer> Identity();
  void AddPrepend(std::string text);
  void AddReplace(std::string from, std::string to);  // literal pattern

  // Normalizes one text segment (valid UTF-8) in place.
  void Apply(std::string* text) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    enum Kind {
      kNfc,
      kNfd,
      kNfkc,
      kNfkd,
      kLowercase,
      kPrepend,
      kReplace,
      kStrip
    } kind = kNfc;
    std::string a;                 // Prepend: text; Replace: literal pattern
    std::string b;                 // Replace: content
    std::unique_ptr<Regex> regex;  // Replace with a regex pattern
    bool left = false, right = false;  // Strip
  };

  Normalizer() = default;
  absl::Status AddFromJson(const nlohmann::json& j);
  std::vector<Step> steps_;
};

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_NORMALIZER_H_
