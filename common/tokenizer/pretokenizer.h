// Pre-tokenization: splitting a normalized text segment into the words that
// BPE sees, following HF tokenizers' pre_tokenizer semantics. Supported
// steps: Split (regex or string pattern, every behavior, invert), ByteLevel
// (add_prefix_space, use_regex = GPT-2 regex; maps bytes to GPT-2
// characters), Digits, Metaspace, Sequence. llama.cpp's GGUF pre-tokenizer
// names ("tokenizer.ggml.pre") map onto a list of isolating regexes.
#ifndef TANDEM_COMMON_TOKENIZER_PRETOKENIZER_H_
#define TANDEM_COMMON_TOKENIZER_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/regex.h"
#include "nlohmann/json.hpp"

namespace tandem::tok {

// Splitting a string by matches, with HF tokenizers' SplitDelimiterBehavior
// semantics (used by the Split, Digits and Metaspace steps).
enum class SplitBehavior {
  kRemoved,
  kIsolated,
  kMergedWithPrevious,
  kMergedWithNext,
  kContiguous
};

// Splits `text` given its sorted, non-overlapping `matches` ([begin, end)
// byte ranges). `invert` swaps the roles of matches and the text between
// them. Appends the non-empty pieces as [begin, end) ranges.
void SplitByMatches(std::string_view text,
                    const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, bool invert,
                    std::vector<std::pair<size_t, size_t>>* pieces);

inline constexpr std::string_view kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
    "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class PreTokenizer {
 public:
  // `j` is tokenizer.json's "pre_tokenizer" (null: the segment is one word).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(
      const nlohmann::json& j);
  // llama.cpp style: each regex isolates its matches in turn, then the
  // byte-level map is applied when `byte_level`.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromRegexes(
      const std::vector<std::string>& regexes, bool byte_level);
  static std::unique_ptr<PreTokenizer> Identity();

  ~PreTokenizer();

  // Appends the words of `segment`. `at_start` says the segment begins the
  // input text (Metaspace's prepend_scheme "first").
  void Split(std::string_view segment, bool at_start,
             std::vector<std::string>* words) const;

  bool byte_level() const { return byte_level_; }

 private:
  struct Step;
  PreTokenizer() = default;
  absl::Status AddFromJson(const nlohmann::json& j);
  std::vector<std::unique_ptr<Step>> steps_;
  bool byte_level_ = false;
};

// Regexes llama.cpp uses for a GGUF "tokenizer.ggml.pre" value (unknown or
// empty names get llama.cpp's "default" set). Sets *ignore_merges for the
// pre-tokenizers llama.cpp tokenizes with ignore_merges (llama3, tekken).
std::vector<std::string> LlamaCppPreRegexes(std::string_view pre,
                                            bool* ignore_merges, bool* known);

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_PRETOKENIZER_H_
