#include "coordinator/structured/json_grammar.h"

namespace tandem::structured {
namespace {

bool IsSpace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

}  // namespace

JsonGrammar::JsonGrammar(bool object_only) : object_only_(object_only) {}

bool JsonGrammar::Feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonGrammar::Push(bool object) {
  if (depth_ >= kMaxDepth) return false;
  const uint64_t bit = uint64_t{1} << depth_;
  stack_ = object ? (stack_ | bit) : (stack_ & ~bit);
  ++depth_;
  mode_ = object ? Mode::kKeyOrEnd : Mode::kValueOrEnd;
  return true;
}

bool JsonGrammar::EndValue() {
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfterValue;
  return true;
}

std::pair<uint64_t, uint64_t> JsonGrammar::Key() const {
  // Only the containers still open count; sub_ and the rest only in the
  // modes that read them.
  const uint64_t stack = depth_ == 0 ? 0 : (stack_ & (~uint64_t{0} >> (64 - depth_)));
  const bool in_string = mode_ == Mode::kString || mode_ == Mode::kEscape ||
                         mode_ == Mode::kUnicode || mode_ == Mode::kUtf8;
  const bool uses_sub = mode_ == Mode::kUnicode || mode_ == Mode::kUtf8 ||
                        mode_ == Mode::kLiteral || mode_ == Mode::kNumber;
  uint64_t a = static_cast<uint64_t>(mode_);
  a = (a << 8) | (uses_sub ? sub_ : 0);
  a = (a << 8) | (mode_ == Mode::kLiteral ? literal_ : 0);
  a = (a << 8) | (mode_ == Mode::kUtf8 ? utf8_min_ : 0);
  a = (a << 8) | (mode_ == Mode::kUtf8 ? utf8_max_ : 0);
  a = (a << 8) | static_cast<uint8_t>(depth_);
  a = (a << 1) | (in_string && string_is_key_ ? 1 : 0);
  a = (a << 1) | (object_only_ ? 1 : 0);
  return {a, stack};
}

bool JsonGrammar::operator==(const JsonGrammar& o) const { return Key() == o.Key(); }

bool JsonGrammar::NumberMayEnd() const {
  return sub_ == kZero || sub_ == kInt || sub_ == kFrac || sub_ == kExpDigits;
}

bool JsonGrammar::IsComplete() const {
  return mode_ == Mode::kDone || (mode_ == Mode::kNumber && depth_ == 0 && NumberMayEnd());
}

bool JsonGrammar::StartValue(uint8_t b) {
  switch (b) {
    case '{':
      return Push(true);
    case '[':
      return Push(false);
    case '"':
      mode_ = Mode::kString;
      string_is_key_ = false;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = Mode::kLiteral;
      literal_ = b == 't' ? 0 : (b == 'f' ? 1 : 2);
      sub_ = 1;
      return true;
    case '-':
      mode_ = Mode::kNumber;
      sub_ = kMinus;
      return true;
    default:
      if (!IsDigit(b)) return false;
      mode_ = Mode::kNumber;
      sub_ = b == '0' ? kZero : kInt;
      return true;
  }
}

bool JsonGrammar::Feed(uint8_t b) {
  switch (mode_) {
    case Mode::kStart:
      if (IsSpace(b)) return true;
      if (object_only_ && b != '{') return false;
      return StartValue(b);
    case Mode::kValue:
      return IsSpace(b) || StartValue(b);
    case Mode::kValueOrEnd:
      if (IsSpace(b)) return true;
      if (b == ']') {
        --depth_;
        return EndValue();
      }
      return StartValue(b);
    case Mode::kKeyOrEnd:
    case Mode::kKey:
      if (IsSpace(b)) return true;
      if (b == '}' && mode_ == Mode::kKeyOrEnd) {
        --depth_;
        return EndValue();
      }
      if (b != '"') return false;
      mode_ = Mode::kString;
      string_is_key_ = true;
      return true;
    case Mode::kColon:
      if (IsSpace(b)) return true;
      if (b != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue:
      if (IsSpace(b)) return true;
      if (b == ',') {
        mode_ = InObject() ? Mode::kKey : Mode::kValue;
        return true;
      }
      if (b == (InObject() ? '}' : ']')) {
        --depth_;
        return EndValue();
      }
      return false;
    case Mode::kDone:
      return false;
    case Mode::kString:
      if (b == '"') {
        if (string_is_key_) {
          mode_ = Mode::kColon;
          return true;
        }
        return EndValue();
      }
      if (b == '\\') {
        mode_ = Mode::kEscape;
        return true;
      }
      if (b < 0x20) return false;  // raw control characters must be escaped
      if (b < 0x80) return true;
      // A UTF-8 lead byte: how many continuation bytes follow, and the range
      // of the first (which excludes overlong forms and surrogates).
      utf8_min_ = 0x80;
      utf8_max_ = 0xBF;
      if (b >= 0xC2 && b <= 0xDF) {
        sub_ = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        sub_ = 2;
        if (b == 0xE0) utf8_min_ = 0xA0;
        if (b == 0xED) utf8_max_ = 0x9F;
      } else if (b >= 0xF0 && b <= 0xF4) {
        sub_ = 3;
        if (b == 0xF0) utf8_min_ = 0x90;
        if (b == 0xF4) utf8_max_ = 0x8F;
      } else {
        return false;
      }
      mode_ = Mode::kUtf8;
      return true;
    case Mode::kUtf8:
      if (b < utf8_min_ || b > utf8_max_) return false;
      utf8_min_ = 0x80;
      utf8_max_ = 0xBF;
      if (--sub_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kEscape:
      switch (b) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          mode_ = Mode::kString;
          return true;
        case 'u':
          mode_ = Mode::kUnicode;
          sub_ = 0;
          return true;
        default:
          return false;
      }
    case Mode::kUnicode:
      if (!IsHex(b)) return false;
      if (++sub_ == 4) mode_ = Mode::kString;
      return true;
    case Mode::kLiteral: {
      const std::string_view word = kLiterals[literal_];
      if (b != static_cast<uint8_t>(word[sub_])) return false;
      if (++sub_ == word.size()) return EndValue();
      return true;
    }
    case Mode::kNumber:
      switch (sub_) {
        case kMinus:
          if (!IsDigit(b)) return false;
          sub_ = b == '0' ? kZero : kInt;
          return true;
        case kDot:
          if (!IsDigit(b)) return false;
          sub_ = kFrac;
          return true;
        case kExp:
          if (b == '+' || b == '-') {
            sub_ = kExpSign;
            return true;
          }
          if (!IsDigit(b)) return false;
          sub_ = kExpDigits;
          return true;
        case kExpSign:
          if (!IsDigit(b)) return false;
          sub_ = kExpDigits;
          return true;
        default:  // kZero, kInt, kFrac, kExpDigits: the number may end here
          if (IsDigit(b) && sub_ != kZero) return true;
          if (b == '.' && (sub_ == kZero || sub_ == kInt)) {
            sub_ = kDot;
            return true;
          }
          if ((b == 'e' || b == 'E') && sub_ != kExpDigits) {
            sub_ = kExp;
            return true;
          }
          // The byte ends the number and then counts in its own right.
          EndValue();
          return Feed(b);
      }
  }
  return false;
}

}  // namespace tandem::structured
