#include "coordinator/chat/lexer.h"

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

constexpr size_t npos = std::string_view::npos;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  absl::StatusOr<LexResult> Run() {
    while (pos_ < src_.size()) {
      if (auto s = LexRoot(); !s.ok()) return s;
    }
    Emit(TokenType::kEof, "", src_.size());
    return LexResult{std::move(src_), std::move(tokens_)};
  }

 private:
  bool At(size_t p, std::string_view s) const {
    return p <= src_.size() && src_.compare(p, s.size(), s) == 0;
  }
  char Ch(size_t p) const { return p < src_.size() ? src_[p] : '\0'; }

  // Skips Python (Unicode) whitespace.
  size_t SkipWs(size_t p) const {
    while (p < src_.size()) {
      char32_t c;
      const size_t n = DecodeUtf8At(src_, p, &c);
      if (!IsPySpace(c)) break;
      p += n;
    }
    return p;
  }

  bool AllWs(std::string_view s) const {
    for (size_t i = 0; i < s.size();) {
      char32_t c;
      i += DecodeUtf8At(s, i, &c);
      if (!IsPySpace(c)) return false;
    }
    return true;
  }

  absl::Status Error(size_t offset, std::string_view msg) const {
    const SourcePos p = PosOf(src_, offset);
    return absl::InvalidArgumentError(Cat("template syntax error at line ",
                                          p.line, ", column ", p.column, ": ",
                                          msg));
  }

  void Emit(TokenType type, std::string value, size_t offset) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.offset = static_cast<uint32_t>(offset);
    tokens_.push_back(std::move(t));
  }

  // Text before a tag, with `-` (strip all whitespace) or lstrip_blocks
  // applied.
  void EmitText(size_t begin, size_t end, char sign, bool lstrip_ok) {
    std::string_view text(src_.data() + begin, end - begin);
    if (sign == '-') {
      text = PyStripRight(text);
    } else if (sign != '+' && lstrip_ok) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == npos ? 0 : nl + 1;
      const bool line_starting = begin == 0 || src_[begin - 1] == '\n';
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          AllWs(text.substr(l_pos))) {
        text = text.substr(0, l_pos);
      }
    }
    if (!text.empty()) Emit(TokenType::kData, std::string(text), begin);
  }

  std::string_view PyStripRight(std::string_view text) const {
    // Decode backwards by scanning forwards once (text is short relative to
    // cost).
    size_t keep = 0;
    for (size_t i = 0; i < text.size();) {
      char32_t c;
      const size_t n = DecodeUtf8At(text, i, &c);
      i += n;
      if (!IsPySpace(c)) keep = i;
    }
    return text.substr(0, keep);
  }

  absl::Status LexRoot() {
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == npos || tag + 1 >= src_.size()) {
        tag = npos;
        break;
      }
      const char k = src_[tag + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++tag;
    }
    if (tag == npos) {
      Emit(TokenType::kData, src_.substr(pos_), pos_);
      pos_ = src_.size();
      return absl::OkStatus();
    }
    const char kind = src_[tag + 1];
    size_t p = tag + 2;
    char sign = 0;
    if (Ch(p) == '-' || Ch(p) == '+') sign = src_[p++];

    if (kind == '%') {
      // {% raw %} ... {% endraw %}
      size_t q = SkipWs(p);
      if (At(q, "raw")) {
        q = SkipWs(q + 3);
        size_t body = npos;
        if (At(q, "-%}")) {
          body = SkipWs(q + 3);
        } else if (At(q, "%}")) {
          body = q + 2;
        }
        if (body != npos) {
          EmitText(pos_, tag, sign, true);
          return LexRaw(tag, body);
        }
      }
    }
    EmitText(pos_, tag, sign, kind != '{');
    if (kind == '#') return LexComment(tag, p);
    Emit(kind == '%' ? TokenType::kBlockBegin : TokenType::kVarBegin, "", tag);
    pos_ = p;
    return LexTag(kind == '%');
  }

  absl::Status LexComment(size_t tag, size_t p) {
    for (size_t j = p; j < src_.size(); ++j) {
      if (src_[j] == '+' && At(j + 1, "#}")) {
        pos_ = j + 3;
        return absl::OkStatus();
      }
      if (src_[j] == '-' && At(j + 1, "#}")) {
        pos_ = SkipWs(j + 3);
        return absl::OkStatus();
      }
      if (At(j, "#}")) {
        pos_ = j + 2;
        if (Ch(pos_) == '\n') ++pos_;
        return absl::OkStatus();
      }
    }
    return Error(tag, "Missing end of comment tag");
  }

  absl::Status LexRaw(size_t tag, size_t body) {
    for (size_t j = src_.find("{%", body); j != npos;
         j = src_.find("{%", j + 1)) {
      size_t q = j + 2;
      char sign = 0;
      if (Ch(q) == '-' || Ch(q) == '+') sign = src_[q++];
      q = SkipWs(q);
      if (!At(q, "endraw")) continue;
      q = SkipWs(q + 6);
      size_t after = npos;
      if (At(q, "+%}")) {
        after = q + 3;
      } else if (At(q, "-%}")) {
        after = SkipWs(q + 3);
      } else if (At(q, "%}")) {
        after = q + 2;
        if (Ch(after) == '\n') ++after;
      }
      if (after == npos) continue;
      EmitText(body, j, sign, true);
      pos_ = after;
      return absl::OkStatus();
    }
    return Error(tag, "Missing end of raw directive");
  }

  // Matches (\d+_)*\d+ at p; returns the end or npos.
  size_t Digits(size_t p) const {
    if (!IsDigit(Ch(p))) return npos;
    ++p;
    while (true) {
      if (IsDigit(Ch(p))) {
        ++p;
      } else if (Ch(p) == '_' && IsDigit(Ch(p + 1))) {
        p += 2;
      } else {
        return p;
      }
    }
  }

  size_t MatchFloat(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return npos;
    const size_t a = Digits(p);
    if (a == npos) return npos;
    const size_t frac = Ch(a) == '.' ? Digits(a + 1) : npos;
    size_t e = frac != npos ? frac : a;
    if (Ch(e) == 'e' || Ch(e) == 'E') {
      size_t d = e + 1;
      if (Ch(d) == '+' || Ch(d) == '-') ++d;
      const size_t end = Digits(d);
      if (end != npos) return end;
    }
    return frac;
  }

  size_t MatchInt(size_t p, int* base) const {
    const char c0 = Ch(p);
    if (c0 == '0') {
      const char c1 = static_cast<char>(Ch(p + 1) | 0x20);
      int b = c1 == 'b' ? 2 : c1 == 'o' ? 8 : c1 == 'x' ? 16 : 0;
      if (b != 0) {
        size_t q = p + 2;
        size_t end = npos;
        while (true) {
          size_t r = q;
          if (Ch(r) == '_') ++r;
          const int v = HexValue(Ch(r));
          if (v < 0 || v >= b) break;
          q = r + 1;
          end = q;
        }
        if (end != npos) {
          *base = b;
          return end;
        }
      }
      size_t q = p + 1;
      while (Ch(q) == '0' || (Ch(q) == '_' && Ch(q + 1) == '0'))
        q += Ch(q) == '_' ? 2 : 1;
      *base = 10;
      return q;
    }
    if (c0 >= '1' && c0 <= '9') {
      *base = 10;
      return Digits(p);
    }
    return npos;
  }

  absl::Status LexNumber(size_t p, size_t end, bool is_float) {
    std::string digits;
    for (size_t i = p; i < end; ++i) {
      if (src_[i] != '_') digits.push_back(src_[i]);
    }
    Token t;
    t.offset = static_cast<uint32_t>(p);
    if (is_float) {
      t.type = TokenType::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      int base = 10;
      size_t start = 0;
      if (digits.size() > 1 && digits[0] == '0' && !IsDigit(digits[1])) {
        const char b = static_cast<char>(digits[1] | 0x20);
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        start = 2;
      }
      uint64_t v = 0;
      for (size_t i = start; i < digits.size(); ++i) {
        const auto d = static_cast<uint64_t>(HexValue(digits[i]));
        if (v > (static_cast<uint64_t>(INT64_MAX) - d) /
                    static_cast<uint64_t>(base)) {
          return Error(p, "integer literal too large (64-bit integers only)");
        }
        v = v * static_cast<uint64_t>(base) + d;
      }
      t.type = TokenType::kInt;
      t.int_value = static_cast<int64_t>(v);
    }
    t.value = src_.substr(p, end - p);
    tokens_.push_back(std::move(t));
    pos_ = end;
    return absl::OkStatus();
  }

  absl::Status LexString(size_t p) {
    const char quote = src_[p];
    size_t j = p + 1;
    while (j < src_.size() && src_[j] != quote) j += src_[j] == '\\' ? 2 : 1;
    if (j >= src_.size())
      return Error(p, Cat("unexpected char '", std::string(1, quote), "'"));
    std::string out;
    const std::string_view body(src_.data() + p + 1, j - p - 1);
    for (size_t i = 0; i < body.size(); ++i) {
      const char c = body[i];
      if (c != '\\' || i + 1 >= body.size()) {
        out.push_back(c);
        continue;
      }
      const char n = body[++i];
      auto hex = [&](int count, const char* what) -> absl::StatusOr<uint32_t> {
        uint32_t v = 0;
        for (int k = 0; k < count; ++k) {
          const int h =
              i + 1 + k < body.size() ? HexValue(body[i + 1 + k]) : -1;
          if (h < 0) return Error(p, Cat("truncated ", what, " escape"));
          v = v * 16 + static_cast<uint32_t>(h);
        }
        i += count;
        return v;
      };
      switch (n) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(n);
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          auto v = n == 'x'   ? hex(2, "\\xXX")
                   : n == 'u' ? hex(4, "\\uXXXX")
                              : hex(8, "\\UXXXXXXXX");
          if (!v.ok()) return v.status();
          if (*v > 0x10FFFF)
            return Error(p, "illegal Unicode character in string");
          AppendUtf8(*v, &out);
          break;
        }
        case 'N':
          return Error(p, "\\N{...} escapes are not supported");
        default:
          if (n >= '0' && n <= '7') {
            uint32_t v = static_cast<uint32_t>(n - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() &&
                            body[i + 1] >= '0' && body[i + 1] <= '7';
                 ++k) {
              v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
            }
            AppendUtf8(v, &out);
          } else if (static_cast<unsigned char>(n) >= 0x80) {
            // jinja2 backslash-escapes non-ASCII characters before decoding, so
            // a backslash before one yields the escape's text.
            char32_t cp;
            const size_t len = DecodeUtf8At(body, i, &cp);
            i += len - 1;
            char buf[16];
            std::snprintf(buf, sizeof(buf),
                          cp <= 0xFF     ? "\\x%02x"
                          : cp <= 0xFFFF ? "\\u%04x"
                                         : "\\U%08x",
                          static_cast<unsigned>(cp));
            out.append(buf);
          } else {
            out.push_back('\\');
            out.push_back(n);
          }
      }
    }
    Emit(TokenType::kString, std::move(out), p);
    pos_ = j + 1;
    return absl::OkStatus();
  }

  absl::Status LexTag(bool block) {
    std::vector<char> balance;
    while (pos_ < src_.size()) {
      if (balance.empty()) {
        if (block) {
          if (At(pos_, "+%}")) {
            Emit(TokenType::kBlockEnd, "", pos_);
            pos_ += 3;
            return absl::OkStatus();
          }
          if (At(pos_, "-%}")) {
            Emit(TokenType::kBlockEnd, "", pos_);
            pos_ = SkipWs(pos_ + 3);
            return absl::OkStatus();
          }
          if (At(pos_, "%}")) {
            Emit(TokenType::kBlockEnd, "", pos_);
            pos_ += 2;
            if (Ch(pos_) == '\n') ++pos_;
            return absl::OkStatus();
          }
        } else {
          if (At(pos_, "-}}")) {
            Emit(TokenType::kVarEnd, "", pos_);
            pos_ = SkipWs(pos_ + 3);
            return absl::OkStatus();
          }
          if (At(pos_, "}}")) {
            Emit(TokenType::kVarEnd, "", pos_);
            pos_ += 2;
            return absl::OkStatus();
          }
        }
      }
      const size_t ws = SkipWs(pos_);
      if (ws != pos_) {
        pos_ = ws;
        continue;
      }
      if (size_t end = MatchFloat(pos_); end != npos) {
        if (auto s = LexNumber(pos_, end, true); !s.ok()) return s;
        continue;
      }
      int base = 10;
      if (size_t end = MatchInt(pos_, &base); end != npos) {
        if (auto s = LexNumber(pos_, end, false); !s.ok()) return s;
        continue;
      }
      const char c = src_[pos_];
      char32_t cp;
      size_t e = pos_ + DecodeUtf8At(src_, pos_, &cp);
      if (IsIdentifierStart(cp)) {
        while (e < src_.size()) {
          const size_t n = DecodeUtf8At(src_, e, &cp);
          if (!IsIdentifierChar(cp)) break;
          e += n;
        }
        Emit(TokenType::kName, src_.substr(pos_, e - pos_), pos_);
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        if (auto s = LexString(pos_); !s.ok()) return s;
        continue;
      }
      static constexpr std::string_view kOps2[] = {
          "**", "//", "==", "!=", ">=", "<="};
      std::string op;
      for (std::string_view o : kOps2) {
        if (At(pos_, o)) op = std::string(o);
      }
      if (op.empty() && std::strchr("+-/*%~[](){}><=.:|,;", c) != nullptr &&
          c != '\0') {
        op = std::string(1, c);
      }
      if (op.empty()) {
        char32_t cp;
        DecodeUtf8At(src_, pos_, &cp);
        std::string shown;
        AppendPyStrRepr(EncodeUtf8(std::u32string(1, cp)), &shown);
        return Error(pos_, Cat("unexpected char ", shown));
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) return Error(pos_, Cat("unexpected '", op, "'"));
        const char expected = balance.back();
        balance.pop_back();
        if (expected != op[0]) {
          return Error(pos_, Cat("unexpected '", op, "', expected '",
                                 std::string(1, expected), "'"));
        }
      }
      Emit(TokenType::kOp, op, pos_);
      pos_ += op.size();
    }
    return absl::OkStatus();  // end of input inside a tag: the parser reports
                              // it
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<LexResult> Tokenize(std::string_view source) {
  std::string norm;
  norm.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      norm.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      norm.push_back(source[i]);
    }
  }
  if (!norm.empty() && norm.back() == '\n') norm.pop_back();
  if (norm.size() > UINT32_MAX / 2)
    return absl::InvalidArgumentError("template too large");
  return Lexer(std::move(norm)).Run();
}

SourcePos PosOf(std::string_view source, size_t offset) {
  SourcePos p;
  if (offset > source.size()) offset = source.size();
  for (size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

std::string DescribeToken(const Token& t) {
  switch (t.type) {
    case TokenType::kData:
      return "template data / text";
    case TokenType::kVarBegin:
      return "begin of print statement";
    case TokenType::kVarEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEof:
      return "end of template";
    case TokenType::kString:
      return "string";
    case TokenType::kInt:
      return "integer";
    case TokenType::kFloat:
      return "float";
    default:
      return t.value;
  }
}

}  // namespace tandem::jinja
