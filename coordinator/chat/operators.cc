// Python's arithmetic and comparison operators on Values, as jinja2's
// generated code applies them (64-bit ints: overflow is an error).
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/interpreter.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

const char* OpSymbol(Op op) {
  switch (op) {
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kFloorDiv:
      return "//";
    case Op::kMod:
      return "%";
    case Op::kPow:
      return "**";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    default:
      return "?";
  }
}

absl::Status Unsupported(Op op, const Value& a, const Value& b) {
  return Interpreter::TypeError(Cat("unsupported operand type(s) for ",
                                    OpSymbol(op), ": '", TypeName(a), "' and '",
                                    TypeName(b), "'"));
}

absl::Status Overflow() {
  return absl::InvalidArgumentError(
      "OverflowError: integer result does not fit in 64 bits (not supported)");
}

// Python's float floor division and modulo.
void FloatDivMod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0.0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *mod = m;
}

absl::StatusOr<Value> Repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times <= 0) {
    return seq.is_string() ? Value::String("")
                           : Value::List({}, seq.list().kind);
  }
  if (seq.is_string()) {
    const size_t len = seq.str().size();
    // Python's "" * n; a loop of n empty appends would spin for as long as n says.
    if (len == 0) return Value::String("");
    if (static_cast<uint64_t>(times) > in.limits().max_output_bytes / len) {
      return in.ChargeBytes(in.limits().max_output_bytes + 1);
    }
    TANDEM_RETURN_IF_ERROR(in.ChargeBytes(len * static_cast<size_t>(times)));
    std::string out;
    out.reserve(len * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  const auto& items = seq.list().items;
  if (items.empty()) return Value::List({}, seq.list().kind);
  if (static_cast<uint64_t>(times) >
      static_cast<uint64_t>(in.limits().max_container_nodes) / items.size()) {
    return absl::InvalidArgumentError(Cat("value has more than the limit of ",
                                          in.limits().max_container_nodes,
                                          " elements"));
  }
  TANDEM_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(items.size()) * times));
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), items.begin(), items.end());
  return Value::List(std::move(out), seq.list().kind);
}

}  // namespace

absl::StatusOr<Value> Interpreter::Arith(Op op, const Value& a,
                                         const Value& b) {
  if (op == Op::kMod && a.is_string()) {  // printf-style; any right operand
    TANDEM_ASSIGN_OR_RETURN(std::string s, PercentFormat(*this, a.str(), b));
    TANDEM_RETURN_IF_ERROR(ChargeBytes(s.size()));
    return Value::String(std::move(s));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case Op::kAdd:
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.int_value(), b.int_value(), &r))
          return Overflow();
        return Value::Int(r);
      }
      if (nums) return Value::Float(a.float_value() + b.float_value());
      if (a.is_string() && b.is_string()) {
        TANDEM_RETURN_IF_ERROR(ChargeBytes(a.str().size() + b.str().size()));
        return Value::String(a.str() + b.str());
      }
      if (a.is_plain_seq() && b.is_plain_seq() &&
          a.list().kind == b.list().kind) {
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        TANDEM_RETURN_IF_ERROR(Charge(static_cast<int64_t>(items.size() / 4)));
        return Value::List(std::move(items), a.list().kind);
      }
      if (a.is_string() || a.is_plain_seq()) {
        return TypeError(Cat("can only concatenate ", TypeName(a), " (not \"",
                             TypeName(b), "\") to ", TypeName(a)));
      }
      return Unsupported(op, a, b);
    case Op::kSub:
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.int_value(), b.int_value(), &r))
          return Overflow();
        return Value::Int(r);
      }
      if (nums) return Value::Float(a.float_value() - b.float_value());
      return Unsupported(op, a, b);
    case Op::kMul:
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.int_value(), b.int_value(), &r))
          return Overflow();
        return Value::Int(r);
      }
      if (nums) return Value::Float(a.float_value() * b.float_value());
      if ((a.is_string() || a.is_plain_seq()) && b.is_integral()) {
        return Repeat(*this, a, b.int_value());
      }
      if ((b.is_string() || b.is_plain_seq()) && a.is_integral()) {
        return Repeat(*this, b, a.int_value());
      }
      if (a.is_string() || b.is_string() || a.is_plain_seq() ||
          b.is_plain_seq()) {
        return TypeError(Cat("can't multiply sequence by non-int of type '",
                             TypeName(a.is_string() || a.is_list() ? b : a),
                             "'"));
      }
      return Unsupported(op, a, b);
    case Op::kDiv:
      if (!nums) return Unsupported(op, a, b);
      if (b.float_value() == 0.0) {
        return absl::InvalidArgumentError(
            "ZeroDivisionError: division by zero");
      }
      return Value::Float(a.float_value() / b.float_value());
    case Op::kFloorDiv:
    case Op::kMod:
      if (ints) {
        const int64_t x = a.int_value(), y = b.int_value();
        if (y == 0) {
          return absl::InvalidArgumentError(
              "ZeroDivisionError: integer division or modulo by zero");
        }
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          return op == Op::kMod ? Value::Int(0)
                                : absl::StatusOr<Value>(Overflow());
        }
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          r += y;
          q -= 1;
        }
        return Value::Int(op == Op::kMod ? r : q);
      }
      if (nums) {
        if (b.float_value() == 0.0) {
          return absl::InvalidArgumentError(
              op == Op::kMod
                  ? "ZeroDivisionError: float modulo"
                  : "ZeroDivisionError: float floor division by zero");
        }
        double fd, m;
        FloatDivMod(a.float_value(), b.float_value(), &fd, &m);
        return Value::Float(op == Op::kMod ? m : fd);
      }
      return Unsupported(op, a, b);
    case Op::kPow: {
      if (!nums) return Unsupported(op, a, b);
      if (ints && b.int_value() >= 0) {
        int64_t base = a.int_value(), e = b.int_value(), r = 1;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(r, base, &r)) return Overflow();
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base))
            return Overflow();
        }
        return Value::Int(r);
      }
      const double x = a.float_value(), y = b.float_value();
      if (x == 0.0 && y < 0) {
        return absl::InvalidArgumentError(
            "ZeroDivisionError: 0.0 cannot be raised to a negative power");
      }
      if (x < 0 && y != std::floor(y)) {
        return ValueError("complex results are not supported");
      }
      const double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
        return absl::InvalidArgumentError(
            "OverflowError: (34, 'Numerical result out of range')");
      }
      return Value::Float(r);
    }
    default:
      return absl::InternalError("bad binary operator");
  }
}

absl::StatusOr<bool> Interpreter::CompareOp(Op op, const Value& a,
                                            const Value& b) {
  if (op == Op::kEq || op == Op::kNe) {
    if (a.is_list() || a.is_dict()) {
      TANDEM_RETURN_IF_ERROR(Charge(std::min(a.nodes(), b.nodes()) / 4));
    } else if (a.is_string() && b.is_string()) {
      TANDEM_RETURN_IF_ERROR(
          ChargeScan(std::min(a.str().size(), b.str().size())));
    }
    return Equals(a, b) == (op == Op::kEq);
  }
  switch (op) {
    case Op::kIn:
      return Contains(b, a);
    case Op::kNotIn: {
      TANDEM_ASSIGN_OR_RETURN(bool in, Contains(b, a));
      return !in;
    }
    default:
      break;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number() && !(a.is_integral() && b.is_integral())) {
    const double x = a.float_value(),
                 y = b.float_value();  // NaN compares false
    return op == Op::kLt   ? x < y
           : op == Op::kLe ? x <= y
           : op == Op::kGt ? x > y
                           : x >= y;
  }
  auto c = Compare(a, b);
  if (!c.ok()) {
    return TypeError(Cat("'", OpSymbol(op),
                         "' not supported between instances of '", TypeName(a),
                         "' and '", TypeName(b), "'"));
  }
  return op == Op::kLt   ? *c < 0
         : op == Op::kLe ? *c <= 0
         : op == Op::kGt ? *c > 0
                         : *c >= 0;
}

}  // namespace tandem::jinja
