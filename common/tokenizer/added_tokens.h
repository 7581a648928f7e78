// Added tokens (tokenizer.json "added_tokens", GGUF control/user-defined
// tokens) are cut out of the text before normalization and pre-tokenization,
// as HF tokenizers' AddedVocabulary does: leftmost-longest matching, with
// lstrip / rstrip (swallow neighbouring whitespace) and single_word (only
// when not inside a word). Special tokens are skipped when the caller does not
// want special tokens parsed; non-special added tokens always match.
#ifndef TANDEM_COMMON_TOKENIZER_ADDED_TOKENS_H_
#define TANDEM_COMMON_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched against the normalized text
};

class AddedTokenMatcher {
 public:
  struct Segment {
    size_t begin, end;  // bytes of the input
    int32_t id;         // -1: plain text
  };

  AddedTokenMatcher() = default;
  // `normalize` turns a normalized token's content into the form it is
  // matched in (identity when null).
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens,
                             std::string (*normalize)(const std::string&,
                                                      const void*) = nullptr,
                             const void* ctx = nullptr);

  // Splits `text` into plain-text segments and added-token matches, using
  // the tokens with `normalized` == `normalized_set`.
  void Split(std::string_view text, bool normalized_set, bool parse_special,
             std::vector<Segment>* out) const;

  bool has_normalized() const { return !sets_[1].tokens.empty(); }
  const std::vector<AddedToken>& tokens() const { return all_; }

 private:
  struct Set {
    std::vector<AddedToken> tokens;                   // sorted longest first
    std::array<std::vector<uint32_t>, 256> by_first;  // indices into tokens
  };
  std::vector<AddedToken> all_;
  Set sets_[2];
};

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_ADDED_TOKENS_H_
