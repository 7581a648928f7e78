#include "coordinator/structured/json_lex.h"

namespace tandem::structured {
namespace {

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

}  // namespace

uint32_t StringLexer::Key() const {
  uint32_t k = mode_;
  k = (k << 8) | (mode_ == kPlain || mode_ == kEscape ? 0 : sub_);
  k = (k << 8) | (mode_ == kUtf8 ? utf8_min_ : 0);
  k = (k << 8) | (mode_ == kUtf8 ? utf8_max_ : 0);
  return k;
}

StringLexer::Step StringLexer::Feed(uint8_t b) {
  switch (mode_) {
    case kPlain:
      if (b == '"') return Step::kClose;
      if (b == '\\') {
        mode_ = kEscape;
        return Step::kStart;
      }
      if (b < 0x20) return Step::kBad;  // raw control characters must be escaped
      if (b < 0x80) return Step::kStart;
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
        return Step::kBad;
      }
      mode_ = kUtf8;
      return Step::kStart;
    case kUtf8:
      if (b < utf8_min_ || b > utf8_max_) return Step::kBad;
      utf8_min_ = 0x80;
      utf8_max_ = 0xBF;
      if (--sub_ == 0) mode_ = kPlain;
      return Step::kMore;
    case kEscape:
      switch (b) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          mode_ = kPlain;
          return Step::kMore;
        case 'u':
          mode_ = kUnicode;
          sub_ = 0;
          return Step::kMore;
        default:
          return Step::kBad;
      }
    case kUnicode:
      if (!IsHex(b)) return Step::kBad;
      if (++sub_ == 4) mode_ = kPlain;
      return Step::kMore;
  }
  return Step::kBad;
}

bool NumberLexer::MayEnd() const {
  return state_ == kZero || state_ == kInt || state_ == kFrac || state_ == kExpDigits;
}

NumberLexer::Step NumberLexer::Feed(uint8_t b) {
  switch (state_) {
    case kEmpty:
      if (b == '-') {
        state_ = kMinus;
        return Step::kMore;
      }
      [[fallthrough]];
    case kMinus:
      if (!IsDigit(b)) return Step::kBad;
      state_ = b == '0' ? kZero : kInt;
      return Step::kMore;
    case kDot:
    case kExpSign:
      if (!IsDigit(b)) return Step::kBad;
      state_ = state_ == kDot ? kFrac : kExpDigits;
      return Step::kMore;
    case kExp:
      if (b == '+' || b == '-') {
        state_ = kExpSign;
        return Step::kMore;
      }
      if (!IsDigit(b)) return Step::kBad;
      state_ = kExpDigits;
      return Step::kMore;
    default:  // kZero, kInt, kFrac, kExpDigits: the number may end here
      if (IsDigit(b) && state_ != kZero) return Step::kMore;
      if (!integer_only_) {
        if (b == '.' && (state_ == kZero || state_ == kInt)) {
          state_ = kDot;
          return Step::kMore;
        }
        if ((b == 'e' || b == 'E') && state_ != kExpDigits) {
          state_ = kExp;
          return Step::kMore;
        }
      }
      return Step::kEnd;
  }
}

}  // namespace tandem::structured
