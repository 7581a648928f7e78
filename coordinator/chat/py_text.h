// Python `str` semantics over UTF-8 strings, for the Jinja interpreter.
//
// Python strings are sequences of code points; ours are UTF-8 bytes. Bytes
// that are not valid UTF-8 decode to U+DC80+byte (Python's surrogateescape)
// and encode back to the same byte, so no operation loses input bytes.
// Case mapping is utf8proc's simple mapping plus Python's multi-character
// mappings (py_casing_data.cc: 'ß'.upper() == 'SS') and final sigma.
#ifndef TANDEM_COORDINATOR_CHAT_PY_TEXT_H_
#define TANDEM_COORDINATOR_CHAT_PY_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

// Decodes the code point at s[pos] into *cp; returns its length in bytes (>=
// 1).
size_t DecodeUtf8At(std::string_view s, size_t pos, char32_t* cp);
std::u32string DecodeUtf8(std::string_view s);
void AppendUtf8(char32_t cp, std::string* out);
std::string EncodeUtf8(std::u32string_view s);
bool IsAscii(std::string_view s);
// len(s) in code points.
size_t CodePointCount(std::string_view s);

// Character classes as Python's str methods define them.
bool IsPySpace(char32_t c);      // str.isspace / regex \s
bool IsPyPrintable(char32_t c);  // str.isprintable (used by repr)
bool IsPyAlpha(char32_t c);
bool IsPyDigit(char32_t c);
bool IsPyAlnum(char32_t c);
bool IsPyWordChar(char32_t c);  // regex \w
// Python identifiers (approximately XID_Start / XID_Continue).
bool IsIdentifierStart(char32_t c);
bool IsIdentifierChar(char32_t c);
bool IsPyCased(char32_t c);
bool IsPyUpper(char32_t c);
bool IsPyLower(char32_t c);
char32_t PyToUpper(char32_t c);
char32_t PyToLower(char32_t c);
char32_t PyToTitle(char32_t c);

// str methods. `chars` == nullopt means "whitespace".
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);       // str.title()
std::string PyCapitalize(std::string_view s);  // str.capitalize()
std::string PySwapCase(std::string_view s);    // str.swapcase()
std::string JinjaTitle(std::string_view s);    // the `title` filter
// str.split / str.rsplit. sep == nullopt splits on whitespace runs. The
// separator must not be empty (the caller reports ValueError).
std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRSplit(std::string_view s,
                                  const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> PySplitLines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0 means all.
std::string PyReplace(std::string_view s, std::string_view old_sub,
                      std::string_view new_sub, int64_t count);
// Number of non-overlapping occurrences (str.count).
int64_t PyCount(std::string_view s, std::string_view sub);
// str.find / str.rfind in code points; -1 when absent.
int64_t PyFind(std::string_view s, std::string_view sub, bool reverse);
// str.center(width) / ljust / rjust with a space fill.
std::string PyPad(std::string_view s, int64_t width, char align, char32_t fill);

// repr() of a str: quoted, with Python's escapes.
void AppendPyStrRepr(std::string_view s, std::string* out);
// JSON string as Python's json.dumps writes it.
void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out);

// Python's repr() of a float ("1.0", "1e-05", "inf", "nan").
std::string PyFloatRepr(double d);

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_PY_TEXT_H_
