// UTF-8 and Unicode helpers for the tokenizer: validation, lossy decoding
// with U+FFFD (the "maximal subpart" rule of Unicode §3.9, which Rust's
// String::from_utf8_lossy and so HF tokenizers follow), character classes and
// normal forms (utf8proc).
#ifndef TANDEM_COMMON_TOKENIZER_UNICODE_H_
#define TANDEM_COMMON_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// What sits at text[pos].
struct Utf8Step {
  enum Kind { kValid, kInvalid, kIncomplete } kind;
  // kValid: length of the character (1-4). kInvalid: length of the maximal
  // ill-formed subpart to replace with one U+FFFD (>= 1). kIncomplete: number
  // of bytes left, all a valid prefix of a character cut off by the end.
  size_t len;
  char32_t cp;  // kValid only
};
Utf8Step Utf8At(std::string_view text, size_t pos);

bool IsValidUtf8(std::string_view text);

// Appends `bytes` decoded as UTF-8, each ill-formed subpart replaced by
// U+FFFD. When `final` is false an incomplete character at the very end is
// left alone; returns the number of bytes consumed.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);

inline std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

void AppendCodepoint(char32_t cp, std::string* out);

// Length of the (valid) UTF-8 character starting at text[pos]; 1 for a stray
// byte so that loops always advance.
size_t CharLenAt(std::string_view text, size_t pos);

// A run of code points assigned in Unicode 15.0-16.0, with its general
// category ("Lo", "Nd", ...). HF tokenizers classes characters by Unicode
// 16.0 (Oniguruma's tables, Rust's char); Debian 12's PCRE2 has 14.0 and
// utf8proc 15.0, so the classes below and the regexes' \p{..} add these
// (gen_unicode_since_14.py writes the table).
struct AssignedRange {
  char32_t lo, hi;
  const char* category;
};
const AssignedRange* AssignedSinceUnicode14Begin();
const AssignedRange* AssignedSinceUnicode14End();

// Unicode classes (General Category via utf8proc, completed to Unicode 16.0).
bool IsNumeric(char32_t cp);       // Nd, Nl, No (Rust char::is_numeric)
bool IsAlphanumeric(char32_t cp);  // L*, Nd, Nl, No
bool IsWhitespace(char32_t cp);    // Unicode White_Space

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// `text` must be valid UTF-8. Returns the text unchanged on failure.
std::string Normalize(std::string_view text, NormalForm form);
std::string ToLower(std::string_view text);

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_UNICODE_H_
