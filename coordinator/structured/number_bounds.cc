#include "coordinator/structured/number_bounds.h"

#include <algorithm>
#include <string>

#include "nlohmann/json.hpp"

namespace tandem::structured {
namespace {

// Magnitudes past 10^19 (in grid units, 10^28) are out of reach of the
// digits a bounded number may have; bounds beyond it are clamped there.
constexpr Scaled kLimit = Scaled{10000000000000000000ull} * kScale;

Scaled Pow10(int n) {
  Scaled p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// A JSON number in grid units, rounded down (or up), and whether it lies on
// the grid.
Scaled ToGrid(const nlohmann::ordered_json& v, bool up, bool* exact) {
  const std::string text = v.dump();
  bool neg = false;
  Scaled digits = 0;
  int exp10 = 0, ndigits = 0;
  bool frac = false, any_dropped = false;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    neg = true;
    ++i;
  }
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      frac = true;
    } else if (c >= '0' && c <= '9') {
      if (ndigits < 30) {  // a double's digits are at most 17
        digits = digits * 10 + (c - '0');
        ++ndigits;
        if (frac) --exp10;
      } else {
        if (!frac) ++exp10;
        any_dropped = any_dropped || c != '0';
      }
    } else if (c == 'e' || c == 'E') {
      exp10 += std::stoi(text.substr(i + 1));
      break;
    }
  }
  // value = ±digits * 10^exp10; in grid units ±digits * 10^(exp10 + 9).
  const int shift = exp10 + kMaxDecimals;
  Scaled mag;
  bool on_grid = !any_dropped;
  if (shift >= 0) {
    mag = shift > 30 || digits * Pow10(shift) / Pow10(shift) != digits ? kLimit
                                                                       : digits * Pow10(shift);
  } else if (-shift > 30) {
    mag = 0;
    on_grid = on_grid && digits == 0;
  } else {
    mag = digits / Pow10(-shift);
    on_grid = on_grid && mag * Pow10(-shift) == digits;
  }
  mag = std::min(mag, kLimit);
  *exact = on_grid;
  // Rounding toward -inf (or +inf) moves the magnitude of a negative value
  // the other way.
  const bool round_mag_up = !on_grid && (up != neg);
  if (round_mag_up) ++mag;
  return neg ? -mag : mag;
}

Scaled FloorTo(Scaled v, Scaled m) { return v >= 0 ? v / m * m : -((-v + m - 1) / m * m); }
Scaled CeilTo(Scaled v, Scaled m) { return -FloorTo(-v, m); }

}  // namespace

std::optional<NumberBounds> BoundsOf(const nlohmann::ordered_json& s, bool integer, bool* empty) {
  *empty = false;
  NumberBounds b{-kLimit, kLimit};
  bool any = false;
  auto number = [&](const char* key) -> const nlohmann::ordered_json* {
    const auto it = s.find(key);
    return it != s.end() && it->is_number() ? &*it : nullptr;
  };
  auto flag = [&](const char* key) {
    const auto it = s.find(key);
    return it != s.end() && it->is_boolean() && it->get<bool>();
  };
  bool exact = false;
  if (const nlohmann::ordered_json* v = number("minimum")) {
    b.lo = std::max(b.lo, ToGrid(*v, /*up=*/true, &exact));
    if (flag("exclusiveMinimum") && exact) ++b.lo;  // draft 4
    any = true;
  }
  if (const nlohmann::ordered_json* v = number("exclusiveMinimum")) {
    Scaled lo = ToGrid(*v, /*up=*/true, &exact);
    if (exact) ++lo;
    b.lo = std::max(b.lo, lo);
    any = true;
  }
  if (const nlohmann::ordered_json* v = number("maximum")) {
    b.hi = std::min(b.hi, ToGrid(*v, /*up=*/false, &exact));
    if (flag("exclusiveMaximum") && exact) --b.hi;
    any = true;
  }
  if (const nlohmann::ordered_json* v = number("exclusiveMaximum")) {
    Scaled hi = ToGrid(*v, /*up=*/false, &exact);
    if (exact) --hi;
    b.hi = std::min(b.hi, hi);
    any = true;
  }
  if (!any) return std::nullopt;
  if (integer) {
    b.lo = CeilTo(b.lo, kScale);
    b.hi = FloorTo(b.hi, kScale);
  }
  *empty = b.lo > b.hi;
  return b;
}

bool BoundedNumber::operator==(const BoundedNumber& o) const {
  return neg_ == o.neg_ && dot_ == o.dot_ && int_digits_ == o.int_digits_ && int_ == o.int_ &&
         frac_digits_ == o.frac_digits_ && frac_ == o.frac_;
}

bool BoundedNumber::Reachable(const NumberBounds& b, bool integer) const {
  // The magnitudes reachable from here, as closed intervals [a, z] of grid
  // units, are tried against the bounds (mirrored for a negative number).
  auto meets = [&](Scaled a, Scaled z) {
    const Scaled lo = neg_ ? -z : a, hi = neg_ ? -a : z;
    return lo <= b.hi && hi >= b.lo;
  };
  const Scaled unit = integer ? kScale : 1;  // the finest step a value can take
  if (dot_) {
    const Scaled step = Pow10(kMaxDecimals - frac_digits_);
    const Scaled a = Scaled(int_) * kScale + Scaled(frac_) * step;
    return meets(a, a + step - 1);
  }
  if (int_digits_ == 0) return meets(0, kLimit);  // "-" alone
  // More digits may follow (not after a leading 0): int_ * 10^j + x.
  const int most = int_ == 0 ? 0 : 19 - int_digits_;
  Scaled p = 1;
  for (int j = 0; j <= most; ++j, p *= 10) {
    const Scaled a = Scaled(int_) * p * kScale;
    const Scaled z = (Scaled(int_) + 1) * p * kScale - unit;
    if (meets(a, z)) return true;
  }
  return false;
}

bool BoundedNumber::InBounds(const NumberBounds& b) const {
  const Scaled mag =
      Scaled(int_) * kScale + (dot_ ? Scaled(frac_) * Pow10(kMaxDecimals - frac_digits_) : 0);
  const Scaled v = neg_ ? -mag : mag;
  return v >= b.lo && v <= b.hi;
}

bool BoundedNumber::Feed(uint8_t c, const NumberBounds& b, bool integer) {
  if (c == '-' && int_digits_ == 0 && !neg_) {
    neg_ = true;
  } else if (c == '.') {
    dot_ = true;
  } else if (c >= '0' && c <= '9') {
    if (dot_) {
      if (frac_digits_ >= kMaxDecimals) return false;
      frac_ = frac_ * 10 + (c - '0');
      ++frac_digits_;
    } else {
      if (int_digits_ >= 19) return false;
      int_ = int_ * 10 + (c - '0');
      ++int_digits_;
    }
  } else {
    return false;  // an exponent
  }
  return Reachable(b, integer);
}

}  // namespace tandem::structured
