// A JSON Schema "pattern" (an ECMA-262 regular expression) compiled to a
// deterministic automaton over the bytes of a string's decoded UTF-8
// content, so the schema recognizer can hold a string to it byte by byte.
//
// As JSON Schema reads it, a pattern matches anywhere in the string unless
// anchored: a top-level alternative without '^' may be preceded by
// anything, one without '$' followed by anything. The subset compiled:
// literals (UTF-8 included), '.', classes of ASCII characters ([a-z],
// [^...]; \d \w \s and their complements, whose non-ASCII side is any
// non-ASCII character), groups ((...), (?:...)), '|', and the quantifiers
// * + ? {n} {n,} {n,m} (lazy or not, which decides nothing here). Anchors
// stand only at the ends of a top-level alternative. Backreferences,
// lookaround, \b, and non-ASCII characters inside classes are an
// InvalidArgument, as is an automaton of more than kMaxStates states.
// States from which no match can be completed are removed, so every state
// a string reaches can still end in a match.
#ifndef TANDEM_COORDINATOR_STRUCTURED_BYTE_DFA_H_
#define TANDEM_COORDINATOR_STRUCTURED_BYTE_DFA_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::structured {

class ByteDfa {
 public:
  static constexpr int kMaxStates = 4096;

  static absl::StatusOr<std::shared_ptr<const ByteDfa>> FromPattern(std::string_view pattern);

  int32_t start() const { return 0; }
  // The state after `byte`; -1 when no match can follow.
  int32_t Next(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * 256 + byte];
  }
  bool Accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)]; }
  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }

 private:
  friend class DfaBuilder;
  std::vector<int32_t> next_;  // num_states x 256
  std::vector<bool> accepting_;
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_BYTE_DFA_H_
