#include "common/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer_parts.h"
#include "common/tokenizer/unicode.h"

namespace tandem {

using tok::AddedTokenMatcher;
using tok::TokenizerParts;

namespace tok {
bool IsEndOfGenerationName(const std::string& p) {
  static const char* const kNames[] = {
      "<|eot_id|>",      "<|im_end|>",
      "<|end|>",         "<end_of_turn>",
      "<|endoftext|>",   "<|eom_id|>",
      "<EOT>",           "_<EOT>",
      "<|end_of_text|>", "<｜end▁of▁sentence｜>",
      "<|return|>",      "<|call|>"};
  for (const char* n : kNames) {
    if (p == n) return true;
  }
  return false;
}
}  // namespace tok

Tokenizer::Tokenizer(std::unique_ptr<TokenizerParts> parts)
    : p_(std::move(parts)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromParts(
    std::unique_ptr<TokenizerParts> parts) {
  if (parts->vocab == nullptr || parts->model == nullptr) {
    return absl::InternalError("tokenizer parts lack a vocab or a model");
  }
  if (parts->normalizer == nullptr)
    parts->normalizer = tok::Normalizer::Identity();
  if (parts->pretokenizer == nullptr)
    parts->pretokenizer = tok::PreTokenizer::Identity();
  const int32_t n = parts->vocab->size();
  for (const tok::AddedToken& t : parts->added_tokens) {
    if (t.id < 0 || t.id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token '", t.content, "' has id ", t.id,
                       " outside the vocab of ", n));
    }
  }
  auto check = [n](int32_t id, const char* what) -> absl::Status {
    if (id < -1 || id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " id ", id, " is outside the vocab of ", n));
    }
    return absl::OkStatus();
  };
  if (auto s = check(parts->bos_id, "BOS"); !s.ok()) return s;
  for (int32_t id : parts->prefix_ids) {
    if (auto s = check(id, "post-processor"); !s.ok()) return s;
  }
  for (int32_t id : parts->suffix_ids) {
    if (auto s = check(id, "post-processor"); !s.ok()) return s;
  }
  for (int32_t id : parts->eos_ids) {
    if (auto s = check(id, "EOS"); !s.ok()) return s;
  }
  const tok::Normalizer* norm = parts->normalizer.get();
  parts->matcher = AddedTokenMatcher(
      parts->added_tokens,
      [](const std::string& s, const void* ctx) {
        std::string out = s;
        static_cast<const tok::Normalizer*>(ctx)->Apply(&out);
        return out;
      },
      norm);
  parts->decoder = tok::PieceDecoder(*parts->vocab, parts->decoder_config);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(parts)));
}

void Tokenizer::EncodeText(std::string_view text, bool at_start,
                           std::vector<int32_t>* out) const {
  std::string normalized(text);
  p_->normalizer->Apply(&normalized);
  std::vector<std::string> words;
  auto run = [&](std::string_view piece, bool first) {
    words.clear();
    p_->pretokenizer->Split(piece, first, &words);
    for (const std::string& w : words) p_->model->Tokenize(w, out);
  };
  if (!p_->matcher.has_normalized()) {
    run(normalized, at_start);
    return;
  }
  // Added tokens with normalized=true match the normalized text.
  std::vector<AddedTokenMatcher::Segment> segs;
  p_->matcher.Split(normalized, /*normalized_set=*/true, /*parse_special=*/true,
                    &segs);
  for (const auto& s : segs) {
    if (s.id >= 0) {
      out->push_back(s.id);
    } else {
      run(std::string_view(normalized).substr(s.begin, s.end - s.begin),
          at_start && s.begin == 0);
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::string clean;
  if (!tok::IsValidUtf8(text)) {
    clean = tok::Utf8Lossy(text);
    text = clean;
  }
  std::vector<int32_t> out;
  if (add_bos) out = p_->prefix_ids;
  std::vector<AddedTokenMatcher::Segment> segs;
  p_->matcher.Split(text, /*normalized_set=*/false, parse_special, &segs);
  for (const auto& s : segs) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      EncodeText(text.substr(s.begin, s.end - s.begin), s.begin == 0, &out);
    }
  }
  if (add_bos)
    out.insert(out.end(), p_->suffix_ids.begin(), p_->suffix_ids.end());
  return out;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids,
                              bool skip_special) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    if (!p_->vocab->Contains(id) || (skip_special && IsSpecial(id))) continue;
    if (p_->decoder.join_with_space() && !first) bytes.push_back(' ');
    first = false;
    const std::string_view b = p_->decoder.TokenBytes(id);
    bytes.append(b.data(), b.size());
  }
  std::string text = tok::Utf8Lossy(bytes);
  int strip = p_->decoder.strip_leading();
  size_t cut = 0;
  while (strip-- > 0 && cut < text.size() && text[cut] == ' ') ++cut;
  if (cut > 0) text.erase(0, cut);
  return text;
}

std::string Tokenizer::TokenPiece(int32_t id) const {
  return p_->vocab->Contains(id) ? p_->vocab->Piece(id) : std::string();
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view piece) const {
  return p_->vocab->Find(piece);
}

int64_t Tokenizer::vocab_size() const { return p_->vocab->size(); }
int32_t Tokenizer::bos_id() const { return p_->bos_id; }
const std::vector<int32_t>& Tokenizer::eos_ids() const { return p_->eos_ids; }
const std::string& Tokenizer::chat_template() const {
  return p_->chat_template;
}
void Tokenizer::set_eos_ids(std::vector<int32_t> ids) {
  p_->eos_ids = std::move(ids);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  if (!p_->vocab->Contains(id)) return false;
  const tok::TokenKind k = p_->vocab->Kind(id);
  return k == tok::TokenKind::kSpecial;
}

bool Tokenizer::adds_bos() const {
  return p_->bos_id >= 0 &&
         std::find(p_->prefix_ids.begin(), p_->prefix_ids.end(), p_->bos_id) !=
             p_->prefix_ids.end();
}

absl::Status Tokenizer::ValidateIds(const std::vector<int32_t>& ids) const {
  const int64_t n = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i,
                       " is out of range [0, ", n, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem
