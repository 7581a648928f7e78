// The two lexical pieces of JSON that every recognizer here shares: a
// string's body (after its opening quote) and a number. Each is a few bytes
// of state fed one byte at a time, so the states that hold them stay cheap
// to copy once per vocabulary entry (token_mask.h).
#ifndef TANDEM_COORDINATOR_STRUCTURED_JSON_LEX_H_
#define TANDEM_COORDINATOR_STRUCTURED_JSON_LEX_H_

#include <cstdint>

namespace tandem::structured {

inline bool IsJsonSpace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

// A string's body: valid UTF-8 without raw control characters, escapes
// as RFC 8259 lists them.
class StringLexer {
 public:
  enum class Step : uint8_t {
    kStart,  // the byte starts a character (one more in the string)
    kMore,   // the byte continues a character
    kClose,  // the closing quote
    kBad,    // the byte cannot come here
  };
  Step Feed(uint8_t byte);
  // Between characters (no escape or multi-byte character half read).
  bool AtBoundary() const { return mode_ == kPlain; }
  // After a '\': the next byte names the escape.
  bool InEscape() const { return mode_ == kEscape; }
  // The fields that decide what may follow, packed.
  uint32_t Key() const;
  bool operator==(const StringLexer& o) const { return Key() == o.Key(); }

 private:
  enum Mode : uint8_t { kPlain, kEscape, kUnicode, kUtf8 };
  uint8_t mode_ = kPlain;
  uint8_t sub_ = 0;  // kUnicode: hex digits read; kUtf8: continuation bytes left
  uint8_t utf8_min_ = 0x80, utf8_max_ = 0xBF;  // range of the next continuation byte
};

// A number (RFC 8259), or an integer only (no fraction, no exponent). A
// number ends at the first byte that cannot continue it: that byte is not
// the number's, and the caller feeds it to whatever follows.
class NumberLexer {
 public:
  enum class Step : uint8_t {
    kMore,  // the byte is the number's
    kEnd,   // the number was whole and the byte is not its
    kBad,   // neither
  };
  NumberLexer() = default;
  explicit NumberLexer(bool integer_only) : integer_only_(integer_only) {}
  // The first byte: '-' or a digit.
  static bool Starts(uint8_t byte) { return byte == '-' || (byte >= '0' && byte <= '9'); }
  Step Feed(uint8_t byte);
  // Whole if it ended here.
  bool MayEnd() const;
  uint32_t Key() const { return (uint32_t{state_} << 1) | (integer_only_ ? 1 : 0); }
  bool operator==(const NumberLexer& o) const { return Key() == o.Key(); }

 private:
  enum State : uint8_t {
    kEmpty,      // nothing yet
    kMinus,      // "-"
    kZero,       // "0" or "-0": '.' 'e' or the end
    kInt,        // digits after a non-zero first
    kDot,        // "1."
    kFrac,       // "1.5"
    kExp,        // "1e"
    kExpSign,    // "1e+"
    kExpDigits,  // "1e5"
  };
  uint8_t state_ = kEmpty;
  bool integer_only_ = false;
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_JSON_LEX_H_
