#include "coordinator/chat/py_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace tandem::jinja {
namespace {

int Category(char32_t c) {
  if (c > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool IsLetterCategory(int cat) {
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
         cat == UTF8PROC_CATEGORY_LT || cat == UTF8PROC_CATEGORY_LM ||
         cat == UTF8PROC_CATEGORY_LO;
}

bool IsNumberCategory(int cat) {
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
         cat == UTF8PROC_CATEGORY_NO;
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
         c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Byte offsets of the code points of s (plus s.size() at the end).
std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offs;
  for (size_t i = 0; i < s.size();) {
    offs.push_back(i);
    char32_t c;
    i += DecodeUtf8At(s, i, &c);
  }
  offs.push_back(s.size());
  return offs;
}

}  // namespace

size_t DecodeUtf8At(std::string_view s, size_t pos, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len = 0;
  char32_t c = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  }
  bool ok = len != 0 && pos + len <= s.size();
  for (size_t k = 1; ok && k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[pos + k]);
    if ((b & 0xC0) != 0x80) ok = false;
    c = (c << 6) | (b & 0x3F);
  }
  if (ok && (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)))
    ok = false;
  if (!ok) {
    *cp = 0xDC00 + b0;  // surrogateescape
    return 1;
  }
  *cp = c;
  return len;
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    i += DecodeUtf8At(s, i, &c);
    out.push_back(c);
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c >= 0xDC80 && c <= 0xDCFF) {
    out->push_back(static_cast<char>(c - 0xDC00));  // surrogateescape
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

bool IsAscii(std::string_view s) {
  for (char ch : s) {
    if (static_cast<unsigned char>(ch) >= 0x80) return false;
  }
  return true;
}

size_t CodePointCount(std::string_view s) {
  if (IsAscii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    char32_t c;
    i += DecodeUtf8At(s, i, &c);
  }
  return n;
}

bool IsPySpace(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool IsPyPrintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (Category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool IsPyAlpha(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return IsLetterCategory(Category(c));
}

bool IsPyDigit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return Category(c) == UTF8PROC_CATEGORY_ND;
}

bool IsPyAlnum(char32_t c) {
  if (c < 0x80) return IsPyAlpha(c) || IsPyDigit(c);
  const int cat = Category(c);
  return IsLetterCategory(cat) || IsNumberCategory(cat);
}

bool IsPyWordChar(char32_t c) { return c == '_' || IsPyAlnum(c); }

bool IsIdentifierStart(char32_t c) {
  if (c < 0x80) return c == '_' || IsPyAlpha(c);
  const int cat = Category(c);
  return IsLetterCategory(cat) || cat == UTF8PROC_CATEGORY_NL;
}

bool IsIdentifierChar(char32_t c) {
  if (c < 0x80) return c == '_' || IsPyAlnum(c);
  const int cat = Category(c);
  return IsIdentifierStart(c) || cat == UTF8PROC_CATEGORY_MN ||
         cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ND ||
         cat == UTF8PROC_CATEGORY_PC;
}

bool IsPyCased(char32_t c) {
  const int cat = Category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
         cat == UTF8PROC_CATEGORY_LT;
}

bool IsPyUpper(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_LU; }
bool IsPyLower(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_LL; }

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right) {
  std::u32string set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : IsPySpace(c);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      char32_t c;
      const size_t n = DecodeUtf8At(s, b, &c);
      if (!strip_it(c)) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      // The last code point starts at most 3 bytes before e; if the bytes do
      // not decode to exactly [p, e), the last byte stands alone.
      size_t p = e - 1;
      while (p > b && e - p < 4 &&
             (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80)
        --p;
      char32_t c;
      if (p + DecodeUtf8At(s, p, &c) != e) {
        p = e - 1;
        DecodeUtf8At(s, p, &c);
      }
      if (!strip_it(c)) break;
      e = p;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    size_t start = 0;
    while (maxsplit-- > 0) {
      const size_t p = s.find(*sep, start);
      if (p == std::string_view::npos) break;
      out.emplace_back(s.substr(start, p - start));
      start = p + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  const std::u32string u = DecodeUtf8(s);
  size_t i = 0;
  const size_t n = u.size();
  while (true) {
    while (i < n && IsPySpace(u[i])) ++i;
    if (i == n) break;
    if (maxsplit-- == 0) {
      out.push_back(EncodeUtf8(u.substr(i)));
      break;
    }
    size_t j = i;
    while (j < n && !IsPySpace(u[j])) ++j;
    out.push_back(EncodeUtf8(u.substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> PyRSplit(std::string_view s,
                                  const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    size_t end = s.size();
    while (maxsplit-- > 0) {
      if (end < sep->size()) break;
      const size_t p = s.rfind(*sep, end - sep->size());
      if (p == std::string_view::npos) break;
      out.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::u32string u = DecodeUtf8(s);
    size_t j = u.size();
    while (true) {
      while (j > 0 && IsPySpace(u[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit-- == 0) {
        out.push_back(EncodeUtf8(u.substr(0, j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !IsPySpace(u[i - 1])) --i;
      out.push_back(EncodeUtf8(u.substr(i, j - i)));
      j = i;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> PySplitLines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  const std::u32string u = DecodeUtf8(s);
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    while (j < u.size() && !IsLineBreak(u[j])) ++j;
    size_t eol = j;
    if (j < u.size()) {
      eol = (u[j] == '\r' && j + 1 < u.size() && u[j + 1] == '\n') ? j + 2
                                                                   : j + 1;
    }
    out.push_back(EncodeUtf8(u.substr(i, (keepends ? eol : j) - i)));
    i = eol;
  }
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old_sub,
                      std::string_view new_sub, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_sub.empty()) {
    const std::vector<size_t> offs = CodePointOffsets(s);
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (count > 0) out.append(new_sub), --count;
      out.append(s.substr(offs[i], offs[i + 1] - offs[i]));
    }
    if (count > 0) out.append(new_sub);
    return out;
  }
  size_t start = 0;
  while (count > 0) {
    const size_t p = s.find(old_sub, start);
    if (p == std::string_view::npos) break;
    out.append(s.substr(start, p - start));
    out.append(new_sub);
    start = p + old_sub.size();
    --count;
  }
  out.append(s.substr(start));
  return out;
}

int64_t PyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(CodePointCount(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string_view::npos;
       p = s.find(sub, p + sub.size())) {
    ++n;
  }
  return n;
}

int64_t PyFind(std::string_view s, std::string_view sub, bool reverse) {
  const size_t p = reverse ? s.rfind(sub) : s.find(sub);
  if (p == std::string_view::npos) return -1;
  return static_cast<int64_t>(CodePointCount(s.substr(0, p)));
}

std::string PyPad(std::string_view s, int64_t width, char align,
                  char32_t fill) {
  const auto len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return std::string(s);
  const int64_t marg = width - len;
  int64_t left = 0;
  if (align == '^') {
    left = marg / 2 + (marg & width & 1);
  } else if (align == '>') {
    left = marg;
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) AppendUtf8(fill, &out);
  out.append(s);
  for (int64_t i = 0; i < marg - left; ++i) AppendUtf8(fill, &out);
  return out;
}

void AppendPyStrRepr(std::string_view s, std::string* out) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out->push_back(quote);
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    const size_t n = DecodeUtf8At(s, i, &c);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (IsPyPrintable(c)) {
      out->append(s.substr(i, n));
    } else {
      if (c <= 0xFF) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c <= 0xFFFF) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out->append(buf);
    }
    i += n;
  }
  out->push_back(quote);
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    const size_t n = DecodeUtf8At(s, i, &c);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out->append(buf);
        } else if (c < 0x80 || !ensure_ascii) {
          out->append(s.substr(i, n));
        } else if (c <= 0xFFFF) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out->append(buf);
        } else {
          const char32_t v = c - 0x10000;
          std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x",
                        static_cast<unsigned>(0xD800 | (v >> 10)),
                        static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          out->append(buf);
        }
    }
    i += n;
  }
  out->push_back('"');
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res =
      std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf,
                       static_cast<size_t>(res.ptr - buf));  // e.g. "-1.25e+02"
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char ch : sci.substr(0, e)) {
    if (ch != '.') digits.push_back(ch);
  }
  int exp10 = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0),
                  sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
             digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (nd > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof(buf), "e%c%02d", exp10 < 0 ? '-' : '+',
                std::abs(exp10));
  out += buf;
  return out;
}

}  // namespace tandem::jinja
