// JSON Schema's minimum, maximum, exclusiveMinimum and exclusiveMaximum,
// held while a number is written: after each byte, is a number within the
// bounds still reachable from what is written, and may it end here?
//
// Values are compared exactly on a grid of 1e-9 (kScale units per 1), in
// 128-bit integers: a bound off the grid is rounded inward, so no value
// outside the bounds is ever accepted. A bounded number is written without
// an exponent, with at most 19 digits before the point and kMaxDecimals
// after it; texts outside that are refused, never values outside the bounds.
#ifndef TANDEM_COORDINATOR_STRUCTURED_NUMBER_BOUNDS_H_
#define TANDEM_COORDINATOR_STRUCTURED_NUMBER_BOUNDS_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "nlohmann/json_fwd.hpp"

namespace tandem::structured {

using Scaled = __int128;
inline constexpr Scaled kScale = 1000000000;  // grid units per 1
inline constexpr int kMaxDecimals = 9;

struct NumberBounds {
  Scaled lo = 0, hi = 0;  // inclusive, in grid units
};

// From a schema's keywords (JSON numbers; draft 4's boolean exclusive*
// too); nullopt when there are none. For integers the bounds are whole.
// Sets *empty when no value lies within them.
std::optional<NumberBounds> BoundsOf(const nlohmann::ordered_json& schema, bool integer,
                                     bool* empty);

// The number being written, as far as the bounds need it.
class BoundedNumber {
 public:
  // Whether `byte` may come next (the lexer has said it is a number byte),
  // and the state after it.
  bool Feed(uint8_t byte, const NumberBounds& b, bool integer);
  // The value written so far is within the bounds (the lexer says whether
  // the text may end here).
  bool InBounds(const NumberBounds& b) const;
  bool operator==(const BoundedNumber& o) const;
  template <typename H>
  friend H AbslHashValue(H h, const BoundedNumber& n) {
    return H::combine(std::move(h), n.neg_, n.dot_, n.int_digits_, n.int_, n.frac_digits_, n.frac_);
  }

 private:
  // Some value with the digits written so far lies within the bounds.
  bool Reachable(const NumberBounds& b, bool integer) const;

  bool neg_ = false;
  bool dot_ = false;
  uint8_t int_digits_ = 0;
  uint8_t frac_digits_ = 0;
  uint64_t int_ = 0;   // the digits before the point
  uint32_t frac_ = 0;  // the digits after it
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_NUMBER_BOUNDS_H_
