// Tandem's tokenizer: byte-level BPE (GPT-2, Llama-3, Qwen, SmolLM2) and
// SentencePiece-style BPE with byte fallback (Llama-2, Mistral, Mixtral),
// loaded from HF tokenizer.json (+ tokenizer_config.json) or from GGUF
// metadata. Results match HF `tokenizers` token for token; see
// tests/golden/make_tokenizer_goldens.py.
//
// Thread-safety: a loaded Tokenizer is immutable apart from an internal,
// mutex-guarded word cache; Encode/Decode may run concurrently.
#ifndef TANDEM_COMMON_TOKENIZER_TOKENIZER_H_
#define TANDEM_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem {

class GgufFile;
namespace tok {
struct TokenizerParts;
}  // namespace tok

class Tokenizer {
 public:
  // `tokenizer_json` / `tokenizer_config` are file paths; the config may be
  // "" (then BOS/EOS/add_bos come from tokenizer.json alone).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromHfFiles(
      const std::string& tokenizer_json, const std::string& tokenizer_config);
  // Same, from the files' contents.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromHfJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(
      const GgufFile& gguf);

  ~Tokenizer();

  // add_bos: add what the model's config asks for around a sequence (BOS
  // from add_bos_token / tokenizer.ggml.add_bos_token / a TemplateProcessing
  // post-processor; also EOS where the config asks for add_eos_token).
  // parse_special: text such as "<|im_start|>" becomes the special token;
  // otherwise it is encoded as plain text (non-special added tokens such as
  // Qwen3's "<think>" are always matched, as in HF and llama.cpp). Invalid
  // UTF-8 in `text` is read as U+FFFD.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos = true,
                              bool parse_special = true) const;
  // Ids out of range are skipped (ValidateIds reports them).
  std::string Decode(const std::vector<int32_t>& ids,
                     bool skip_special = false) const;

  std::string TokenPiece(
      int32_t id) const;  // raw vocab entry ("" if out of range)
  std::optional<int32_t> TokenToId(std::string_view piece) const;

  int64_t vocab_size() const;  // ids are [0, vocab_size())
  int32_t bos_id() const;      // -1 if the model has none
  const std::vector<int32_t>& eos_ids()
      const;  // end-of-generation ids, first = EOS
  bool IsSpecial(int32_t id) const;
  bool adds_bos() const;  // whether Encode(add_bos=true) prepends BOS
  // From tokenizer_config.json "chat_template" or GGUF tokenizer.chat_template.
  const std::string& chat_template() const;
  // InvalidArgument naming the first id out of [0, vocab_size()).
  absl::Status ValidateIds(const std::vector<int32_t>& ids) const;

  // Replaces the end-of-generation ids (e.g. from generation_config.json).
  void set_eos_ids(std::vector<int32_t> ids);

  // Internal: used by the loaders and StreamingDetokenizer.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromParts(
      std::unique_ptr<tok::TokenizerParts> parts);
  const tok::TokenizerParts& parts() const { return *p_; }

 private:
  explicit Tokenizer(std::unique_ptr<tok::TokenizerParts> parts);
  void EncodeText(std::string_view text, bool at_start,
                  std::vector<int32_t>* out) const;

  std::unique_ptr<tok::TokenizerParts> p_;
};

// Streaming-safe detokenizer: Push returns only complete UTF-8 characters,
// holding back an incomplete byte sequence until later tokens complete it;
// Flush emits the rest (ill-formed leftovers as U+FFFD). The leading-space
// rule of SentencePiece models is applied as Decode applies it, so the
// concatenation of every Push and the final Flush equals Decode(all ids).
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& t, bool skip_special = false);
  std::string Push(int32_t id);
  std::string Flush();

 private:
  std::string Emit(bool final);

  const Tokenizer& t_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete character
  int strip_left_;       // leading spaces still to drop
  bool seen_token_ = false;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_TOKENIZER_TOKENIZER_H_
