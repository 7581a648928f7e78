#include "common/tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace tandem::tok {

Utf8Step Utf8At(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b0 = s[pos];
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1, 0};
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= n) return {Utf8Step::kIncomplete, i, 0};
    const uint8_t b = s[pos + i];
    const uint8_t l = i == 1 ? lo : 0x80;
    const uint8_t h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Step::kInvalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, need, cp};
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = Utf8At(text, i);
    if (st.kind != Utf8Step::kValid) return false;
    i += st.len;
  }
  return true;
}

size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  size_t i = 0;
  size_t run = 0;  // start of the pending run of valid bytes
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = Utf8At(bytes, i);
    if (st.kind == Utf8Step::kValid) {
      i += st.len;
      continue;
    }
    out->append(bytes.data() + run, i - run);
    if (st.kind == Utf8Step::kIncomplete && !final) return i;
    out->append(kReplacementChar);
    i += st.len;
    run = i;
  }
  out->append(bytes.data() + run, i - run);
  return i;
}

void AppendCodepoint(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t CharLenAt(std::string_view text, size_t pos) {
  const Utf8Step st = Utf8At(text, pos);
  return st.kind == Utf8Step::kValid ? st.len : 1;
}

namespace {
constexpr AssignedRange kAssignedSince14[] = {
#include "common/tokenizer/unicode_since_14.inc"
};

// utf8proc's categories in the order of utf8proc_category_t.
constexpr const char* kCategoryNames[] = {
    "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
    "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};

utf8proc_category_t Category(char32_t cp) {
  const auto c =
      static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
  if (c != UTF8PROC_CATEGORY_CN) return c;
  // Unassigned to utf8proc: perhaps assigned since (the table is sorted).
  const AssignedRange* r =
      std::upper_bound(std::begin(kAssignedSince14), std::end(kAssignedSince14), cp,
                       [](char32_t v, const AssignedRange& a) { return v < a.lo; });
  if (r == std::begin(kAssignedSince14) || cp > (--r)->hi) return c;
  for (size_t i = 0; i < std::size(kCategoryNames); ++i) {
    if (std::string_view(kCategoryNames[i]) == r->category) {
      return static_cast<utf8proc_category_t>(i);
    }
  }
  return c;
}
}  // namespace

const AssignedRange* AssignedSinceUnicode14Begin() { return std::begin(kAssignedSince14); }
const AssignedRange* AssignedSinceUnicode14End() { return std::end(kAssignedSince14); }

bool IsNumeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = Category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL ||
         c == UTF8PROC_CATEGORY_NO;
}

bool IsAlphanumeric(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') ||
           (cp >= 'A' && cp <= 'Z');
  }
  const auto c = Category(cp);
  switch (c) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

bool IsWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {
std::string Map(std::string_view text, int options) {
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &dst,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);
  std::string out(reinterpret_cast<char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

// Composes, working around utf8proc before 2.9 (Debian 12 ships 2.8.0), which
// composes a Hangul LV syllable with a following U+11A7 as if it were a
// trailing consonant (those start at U+11A8) and so drops the U+11A7: NFC of
// "\uC640\u11A7" came out as "\uC640". U+11A7 is a starter that is in no
// composition pair, so text on either side of it cannot compose across it,
// and normalizing the pieces between U+11A7s apart is exact.
std::string MapComposed(std::string_view text, int options) {
  constexpr std::string_view kU11A7 = "\xE1\x86\xA7";
  size_t at = text.find(kU11A7);
  if (at == std::string_view::npos) return Map(text, options);
  std::string out;
  size_t start = 0;
  for (;;) {
    const std::string_view piece = text.substr(start, at - start);
    if (!piece.empty()) out += Map(piece, options);
    if (at == std::string_view::npos) break;
    out += kU11A7;
    start = at + kU11A7.size();
    at = text.find(kU11A7, start);
  }
  return out;
}

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}
}  // namespace

std::string Normalize(std::string_view text, NormalForm form) {
  if (IsAscii(text))
    return std::string(text);  // ASCII is invariant in every form
  switch (form) {
    case NormalForm::kNfc:
      return MapComposed(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case NormalForm::kNfd:
      return Map(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalForm::kNfkc:
      return MapComposed(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::kNfkd:
      return Map(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return std::string(text);
}

std::string ToLower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step st = Utf8At(text, i);
    if (st.kind != Utf8Step::kValid) {
      out.push_back(text[i++]);
      continue;
    }
    AppendCodepoint(static_cast<char32_t>(
                        utf8proc_tolower(static_cast<utf8proc_int32_t>(st.cp))),
                    &out);
    i += st.len;
  }
  return out;
}

}  // namespace tandem::tok
