// Python's case mapping (str.upper/lower/title/capitalize/swapcase and the
// Jinja title filter): utf8proc's simple mappings, Python's multi-character
// mappings (py_casing_data.cc) and the final-sigma rule of str.lower().
#include <utf8proc.h>

#include <algorithm>
#include <string>

#include "coordinator/chat/py_casing_data.h"
#include "coordinator/chat/py_text.h"

namespace tandem::jinja {
namespace {

int Category(char32_t c) {
  if (c > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

enum class Case { kUpper, kLower, kTitle };

// Appends Python's full case mapping of c (one to three code points).
void AppendCased(char32_t c, Case which, std::string* out) {
  if (c >= 0x80) {
    const SpecialCase* table = which == Case::kUpper   ? kSpecialUpper
                               : which == Case::kLower ? kSpecialLower
                                                       : kSpecialTitle;
    const size_t n = which == Case::kUpper   ? kSpecialUpperSize
                     : which == Case::kLower ? kSpecialLowerSize
                                             : kSpecialTitleSize;
    const SpecialCase* it = std::lower_bound(
        table, table + n, c,
        [](const SpecialCase& s, char32_t v) { return s.cp < v; });
    if (it != table + n && it->cp == c) {
      for (char32_t x : it->to) {
        if (x != 0) AppendUtf8(x, out);
      }
      return;
    }
  }
  AppendUtf8(which == Case::kUpper   ? PyToUpper(c)
             : which == Case::kLower ? PyToLower(c)
                                     : PyToTitle(c),
             out);
}

bool IsCaseIgnorable(char32_t c) {
  switch (c) {
    case '\'':
    case '.':
    case ':':
    case '^':
    case '`':
    case 0xB7:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0xFE52:
    case 0xFF07:
    case 0xFF0E:
      return true;
    default:
      break;
  }
  const int cat = Category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME ||
         cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_LM ||
         cat == UTF8PROC_CATEGORY_SK;
}

// Python lowers U+03A3 to final sigma at the end of a word.
bool IsFinalSigma(const std::u32string& u, size_t i) {
  size_t j = i;
  while (j > 0 && IsCaseIgnorable(u[j - 1])) --j;
  if (j == 0 || !IsPyCased(u[j - 1])) return false;
  size_t k = i + 1;
  while (k < u.size() && IsCaseIgnorable(u[k])) ++k;
  return k == u.size() || !IsPyCased(u[k]);
}

void AppendLower(const std::u32string& u, size_t i, std::string* out) {
  if (u[i] == 0x03A3) {
    AppendUtf8(IsFinalSigma(u, i) ? 0x03C2 : 0x03C3, out);
  } else {
    AppendCased(u[i], Case::kLower, out);
  }
}

}  // namespace

char32_t PyToUpper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c > 0x10FFFF) return c;
  return static_cast<char32_t>(
      utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}

char32_t PyToLower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c > 0x10FFFF) return c;
  return static_cast<char32_t>(
      utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

char32_t PyToTitle(char32_t c) {
  if (c < 0x80) return PyToUpper(c);
  if (c > 0x10FFFF) return c;
  return static_cast<char32_t>(
      utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

std::string PyUpper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    i += DecodeUtf8At(s, i, &c);
    AppendCased(c, Case::kUpper, &out);
  }
  return out;
}

std::string PyLower(std::string_view s) {
  const std::u32string u = DecodeUtf8(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < u.size(); ++i) AppendLower(u, i, &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  const std::u32string u = DecodeUtf8(s);
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < u.size(); ++i) {
    if (prev_cased) {
      AppendLower(u, i, &out);
    } else {
      AppendCased(u[i], Case::kTitle, &out);
    }
    prev_cased = IsPyCased(u[i]);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  const std::u32string u = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      AppendCased(u[i], Case::kTitle, &out);
    } else {
      AppendLower(u, i, &out);
    }
  }
  return out;
}

std::string PySwapCase(std::string_view s) {
  const std::u32string u = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (IsPyUpper(u[i])) {
      AppendLower(u, i, &out);
    } else if (IsPyLower(u[i])) {
      AppendCased(u[i], Case::kUpper, &out);
    } else {
      AppendUtf8(u[i], &out);
    }
  }
  return out;
}

std::string JinjaTitle(std::string_view s) {
  // "".join(item[0].upper() + item[1:].lower() for item in
  // re.split(r"([-\s({\[<]+)", s))
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
           IsPySpace(c);
  };
  const std::u32string u = DecodeUtf8(s);
  std::string out;
  for (size_t start = 0; start < u.size();) {
    size_t end = start + 1;
    while (end < u.size() && is_sep(u[end]) == is_sep(u[start])) ++end;
    AppendCased(u[start], Case::kUpper, &out);
    const std::u32string rest = u.substr(start + 1, end - start - 1);
    for (size_t i = 0; i < rest.size(); ++i) AppendLower(rest, i, &out);
    start = end;
  }
  return out;
}

}  // namespace tandem::jinja
