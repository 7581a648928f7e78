#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_parts.h"
#include "common/tokenizer/unicode.h"

namespace tandem {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& t,
                                           bool skip_special)
    : t_(t),
      skip_special_(skip_special),
      strip_left_(t.parts().decoder.strip_leading()) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  const tok::TokenizerParts& p = t_.parts();
  if (!p.vocab->Contains(id) || (skip_special_ && t_.IsSpecial(id))) return {};
  if (p.decoder.join_with_space() && seen_token_) pending_.push_back(' ');
  seen_token_ = true;
  const std::string_view b = p.decoder.TokenBytes(id);
  pending_.append(b.data(), b.size());
  return Emit(/*final=*/false);
}

std::string StreamingDetokenizer::Flush() { return Emit(/*final=*/true); }

std::string StreamingDetokenizer::Emit(bool final) {
  std::string text;
  const size_t used = tok::AppendUtf8Lossy(pending_, final, &text);
  pending_.erase(0, used);
  size_t cut = 0;
  while (strip_left_ > 0 && cut < text.size()) {
    if (text[cut] != ' ') {
      strip_left_ = 0;
      break;
    }
    ++cut;
    --strip_left_;
  }
  if (cut > 0) text.erase(0, cut);
  return text;
}

}  // namespace tandem
