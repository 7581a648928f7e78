// Token vocabulary: id <-> piece, and what kind of token each id is.
#ifndef TANDEM_COMMON_TOKENIZER_VOCAB_H_
#define TANDEM_COMMON_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace tandem::tok {

enum class TokenKind : uint8_t {
  kNormal,       // produced by the BPE model
  kSpecial,      // control / special added token (BOS, EOS, <|im_start|>, ...)
  kUserDefined,  // added token that is not special (always matched as a whole)
  kByte,         // <0xXX> byte-fallback token
  kUnknown,      // <unk>
  kUnused,
};

class Vocab {
 public:
  // Sets piece and kind of `id`, growing the table as needed. The piece
  // indexes to `id` unless it is empty or already indexed and `overwrite` is
  // false. `in_model`: the BPE model may produce this token (it is in
  // tokenizer.json's model.vocab, or a normal GGUF token) -- added tokens
  // that are not are only ever matched as a whole.
  void Set(int32_t id, std::string piece, TokenKind kind, bool in_model);
  void SetKind(int32_t id, TokenKind kind) { kinds_[id] = kind; }

  std::optional<int32_t> Find(std::string_view piece) const {
    auto it = index_.find(absl::string_view(piece.data(), piece.size()));
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }
  // -1 if absent.
  int32_t FindOr(std::string_view piece) const {
    auto it = index_.find(absl::string_view(piece.data(), piece.size()));
    return it == index_.end() ? -1 : it->second;
  }
  // Id of `piece` if the BPE model may produce it, else -1.
  int32_t FindInModel(std::string_view piece) const {
    const int32_t id = FindOr(piece);
    return id >= 0 && in_model_[id] ? id : -1;
  }
  bool InModel(int32_t id) const { return in_model_[id]; }
  bool Contains(int32_t id) const { return id >= 0 && id < size(); }
  const std::string& Piece(int32_t id) const { return pieces_[id]; }
  TokenKind Kind(int32_t id) const { return kinds_[id]; }
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  void Reserve(size_t n) {
    pieces_.reserve(n);
    kinds_.reserve(n);
    in_model_.reserve(n);
    index_.reserve(n);
  }

  // Id of the "<0xXX>" token for each byte (-1 if absent).
  std::vector<int32_t> ByteTokenIds() const;

 private:
  std::vector<std::string> pieces_;
  std::vector<TokenKind> kinds_;
  std::vector<bool> in_model_;
  absl::flat_hash_map<std::string, int32_t> index_;
};

// Parses "<0xXX>" (exactly this form, upper or lower case hex).
std::optional<uint8_t> ParseByteToken(std::string_view piece);

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_VOCAB_H_
