// A byte-level recognizer of JSON (RFC 8259) for constrained decoding: it is
// fed the bytes a model generates and says, before each byte, whether that
// byte can continue a valid JSON text. The state is a small value type, so
// the token mask (token_mask.h) copies it once per vocabulary entry and
// feeds the entry's bytes.
//
// What it accepts: one JSON value (an object only, when object_only),
// optional whitespace before it, nothing after it; strings of valid UTF-8
// without raw control characters; nesting to kMaxDepth. Numbers end at the
// first byte that cannot continue them, so "12" is complete only once a
// following ',' ']' '}' or whitespace arrives — or, at the top level, when
// the text ends (IsComplete). A run of whitespace is at most
// kMaxWhitespaceRun bytes: a model that would pad its answer without end
// is made to go on with the JSON instead.
#ifndef TANDEM_COORDINATOR_STRUCTURED_JSON_GRAMMAR_H_
#define TANDEM_COORDINATOR_STRUCTURED_JSON_GRAMMAR_H_

#include <cstdint>
#include <string_view>
#include <utility>

#include "coordinator/structured/json_lex.h"

namespace tandem::structured {

class JsonGrammar {
 public:
  static constexpr int kMaxDepth = 64;
  // Enough for pretty-printed JSON (a newline and the indentation of 15
  // levels of four spaces); a runaway model meets the limit within a few
  // tokens.
  static constexpr int kMaxWhitespaceRun = 64;

  explicit JsonGrammar(bool object_only = false);

  // Feeds one byte; false (and the state is then unspecified) when it
  // cannot continue a valid JSON text.
  bool Feed(uint8_t byte);
  // Feeds every byte; false at the first that does not fit.
  bool Feed(std::string_view bytes);

  // The top-level value is whole (nothing more may follow but nothing
  // more is needed).
  bool IsComplete() const;
  // Whitespace only so far, or nothing.
  bool AtStart() const { return mode_ == Mode::kStart; }
  // The top-level value has closed (a container, string or literal): no
  // byte may follow. A number is never closed, only IsComplete.
  bool Closed() const { return mode_ == Mode::kDone; }

  // Two states that accept the same continuations compare equal (what a
  // finished container was, or a closed string's kind, is forgotten), so
  // token masks can be cached by state.
  bool operator==(const JsonGrammar& o) const;
  template <typename H>
  friend H AbslHashValue(H h, const JsonGrammar& g) {
    return H::combine(std::move(h), g.Key());
  }

 private:
  enum class Mode : uint8_t {
    kStart,       // before the top-level value
    kValue,       // a value is expected (after ':' '[' or ',' in an array)
    kValueOrEnd,  // after '[': a value or ']'
    kKeyOrEnd,    // after '{': a key or '}'
    kKey,         // after ',' in an object: a key
    kColon,       // after a key
    kAfterValue,  // after a value inside a container: ',' or its closer
    kDone,        // the top-level value is whole
    kString,      // inside a string (key or value), string_ its lexer
    kLiteral,     // in true / false / null, sub_ bytes matched
    kNumber,      // in a number, number_ its lexer
  };

  bool StartValue(uint8_t byte);  // a value's first byte
  bool EndValue();                // a value (scalar or container) just closed
  bool Push(bool object);
  bool InObject() const { return (stack_ >> (depth_ - 1)) & 1; }
  bool Space();  // a whitespace byte between tokens
  // The fields that decide what may follow, packed.
  std::pair<uint64_t, uint64_t> Key() const;

  Mode mode_ = Mode::kStart;
  bool object_only_ = false;
  bool string_is_key_ = false;
  uint8_t sub_ = 0;      // kLiteral: bytes matched
  uint8_t literal_ = 0;  // 0 true, 1 false, 2 null
  uint8_t spaces_ = 0;   // whitespace bytes since the last token
  StringLexer string_;
  NumberLexer number_;
  int8_t depth_ = 0;
  uint64_t stack_ = 0;  // bit d-1: 1 when the container at depth d is an object
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_JSON_GRAMMAR_H_
