// Decoding ids back to text. Every supported tokenizer.json decoder chain
// reduces to: map each token to bytes (GPT-2 byte map for ByteLevel; string
// replacements such as "▁" -> " " and <0xXX> -> byte for SentencePiece
// style), concatenate, read as UTF-8 with U+FFFD for ill-formed sequences,
// and strip up to N leading spaces from the very start (Strip after Fuse, or
// Metaspace's prefix space). Supported decoders: ByteLevel, Metaspace,
// Replace (string pattern), ByteFallback, Fuse, Strip (start only), Sequence.
//
// One deliberate difference from HF: a run of <0xXX> tokens that is not valid
// UTF-8 becomes U+FFFD per maximal ill-formed subpart (Unicode §3.9), where
// HF's ByteFallback emits one U+FFFD per byte of the whole run. The two agree
// on everything Encode produces from valid text, and this rule is the one a
// streaming detokenizer can follow without waiting for the run to end.
#ifndef TANDEM_COMMON_TOKENIZER_DECODER_H_
#define TANDEM_COMMON_TOKENIZER_DECODER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/vocab.h"
#include "nlohmann/json.hpp"

namespace tandem::tok {

struct DecoderConfig {
  bool byte_level = false;
  bool byte_fallback = false;
  std::vector<std::pair<std::string, std::string>>
      replacements;              // per token, in order
  int strip_leading = 0;         // leading ' ' removed from the whole output
  bool join_with_space = false;  // no decoder at all: HF joins tokens with ' '

  // `j` is tokenizer.json's "decoder" (null: pieces are concatenated as is).
  static absl::StatusOr<DecoderConfig> FromJson(const nlohmann::json& j);
};

// Per-token bytes, precomputed for the whole vocabulary.
class PieceDecoder {
 public:
  PieceDecoder() = default;
  PieceDecoder(const Vocab& vocab, DecoderConfig config);

  // Bytes of token `id` (empty for ids out of range).
  std::string_view TokenBytes(int32_t id) const {
    if (id < 0 || id + 1 >= static_cast<int32_t>(offsets_.size())) return {};
    return std::string_view(bytes_).substr(offsets_[id],
                                           offsets_[id + 1] - offsets_[id]);
  }
  int strip_leading() const { return config_.strip_leading; }
  bool join_with_space() const { return config_.join_with_space; }

 private:
  DecoderConfig config_;
  std::string bytes_;
  std::vector<uint32_t> offsets_;
};

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_DECODER_H_
