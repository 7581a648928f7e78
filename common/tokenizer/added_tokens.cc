#include "common/tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "common/tokenizer/unicode.h"

namespace tandem::tok {
namespace {

// Code point of the character that ends at text[end] (exclusive).
bool LastChar(std::string_view text, size_t end, char32_t* cp, size_t* begin) {
  if (end == 0) return false;
  size_t s = end - 1;
  while (s > 0 && (static_cast<uint8_t>(text[s]) & 0xC0) == 0x80 && end - s < 4)
    --s;
  const Utf8Step st = Utf8At(text, s);
  if (st.kind != Utf8Step::kValid || s + st.len != end) return false;
  *cp = st.cp;
  *begin = s;
  return true;
}

bool IsWordChar(char32_t cp) { return cp == '_' || IsAlphanumeric(cp); }

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(
    std::vector<AddedToken> tokens,
    std::string (*normalize)(const std::string&, const void*), const void* ctx)
    : all_(std::move(tokens)) {
  for (const AddedToken& t : all_) {
    if (t.content.empty()) continue;
    AddedToken m = t;
    if (t.normalized && normalize != nullptr)
      m.content = normalize(t.content, ctx);
    if (m.content.empty()) continue;
    sets_[t.normalized ? 1 : 0].tokens.push_back(std::move(m));
  }
  for (Set& set : sets_) {
    std::stable_sort(set.tokens.begin(), set.tokens.end(),
                     [](const AddedToken& a, const AddedToken& b) {
                       return a.content.size() > b.content.size();
                     });
    for (uint32_t i = 0; i < set.tokens.size(); ++i) {
      set.by_first[static_cast<uint8_t>(set.tokens[i].content[0])].push_back(i);
    }
  }
}

void AddedTokenMatcher::Split(std::string_view text, bool normalized_set,
                              bool parse_special,
                              std::vector<Segment>* out) const {
  const Set& set = sets_[normalized_set ? 1 : 0];
  size_t start_offset = 0;  // end of the last emitted piece
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& cands = set.by_first[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (uint32_t idx : cands) {  // longest first
      const AddedToken& t = set.tokens[idx];
      if (t.content.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, t.content.data(), t.content.size()) ==
              0) {
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + hit->content.size();
    pos = stop;  // matching resumes after this match even if it is rejected
    if (hit->special && !parse_special) continue;
    if (hit->single_word) {
      char32_t cp;
      size_t b;
      const bool word_before = LastChar(text, start, &cp, &b) && IsWordChar(cp);
      bool word_after = false;
      if (stop < text.size()) {
        const Utf8Step st = Utf8At(text, stop);
        word_after = st.kind == Utf8Step::kValid && IsWordChar(st.cp);
      }
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      char32_t cp;
      size_t b;
      while (LastChar(text, s, &cp, &b) && IsWhitespace(cp)) s = b;
      start = std::max(s, start_offset);
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        const Utf8Step st = Utf8At(text, stop);
        if (st.kind != Utf8Step::kValid || !IsWhitespace(st.cp)) break;
        stop += st.len;
      }
      pos = stop;
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, hit->id});
    start_offset = stop;
  }
  if (start_offset < text.size())
    out->push_back({start_offset, text.size(), -1});
}

}  // namespace tandem::tok
