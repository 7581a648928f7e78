// PCRE2 (UTF + UCP, JIT) wrapper for the pre-tokenizer and normalizer regexes.
// HF tokenizers evaluates these patterns with Oniguruma; two differences
// matter for tokenizer patterns, and OnigCompatPattern rewrites the pattern so
// PCRE2 agrees: `\s` also matches U+0085 (NEL) in Oniguruma, and Oniguruma's
// Unicode is 16.0 where Debian 12's PCRE2 has 14.0, so each general-category
// class `\p{L}`, `\p{N}`, `\p{Lo}`, ... gains the code points assigned since
// (unicode_since_14.inc).
#ifndef TANDEM_COMMON_TOKENIZER_REGEX_H_
#define TANDEM_COMMON_TOKENIZER_REGEX_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::tok {

class Regex {
 public:
  // Compiles `pattern` (after OnigCompatPattern). InvalidArgument with
  // PCRE2's message and offset on a syntax error.
  static absl::StatusOr<std::unique_ptr<Regex>> Create(
      const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-empty, non-overlapping matches of `text` (valid UTF-8)
  // as [begin, end) byte ranges, left to right. Thread-safe.
  void FindAll(std::string_view text,
               std::vector<std::pair<size_t, size_t>>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// `\s` -> `[\s\x{85}]`, `\S` -> `[^\s\x{85}]`, and `\s` inside a character
// class gains `\x{85}`.
std::string OnigCompatPattern(std::string_view pattern);

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_REGEX_H_
