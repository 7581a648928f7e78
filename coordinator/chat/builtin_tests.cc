// Jinja's builtin tests, the globals transformers provides, and helpers shared
// by the builtin files.
#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

// ---- tests ----

absl::StatusOr<bool> NoArgs(std::string_view name, const CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {}));
  (void)b;
  return true;
}

#define TANDEM_SIMPLE_TEST(fn, name, expr)                             \
  absl::StatusOr<bool> fn(Interpreter&, const Value& v, CallArgs& a) { \
    TANDEM_RETURN_IF_ERROR(NoArgs(name, a).status());                  \
    return (expr);                                                     \
  }

TANDEM_SIMPLE_TEST(TestDefined, "defined", !v.is_undefined())
TANDEM_SIMPLE_TEST(TestUndefined, "undefined", v.is_undefined())
TANDEM_SIMPLE_TEST(TestNone, "none", v.is_none())
TANDEM_SIMPLE_TEST(TestBoolean, "boolean", v.is_bool())
TANDEM_SIMPLE_TEST(TestTrue, "true", v.is_bool() && v.bool_value())
TANDEM_SIMPLE_TEST(TestFalse, "false", v.is_bool() && !v.bool_value())
TANDEM_SIMPLE_TEST(TestString, "string", v.is_string())
TANDEM_SIMPLE_TEST(TestNumber, "number", v.is_number())
TANDEM_SIMPLE_TEST(TestInteger, "integer", v.is_int())
TANDEM_SIMPLE_TEST(TestFloat, "float", v.is_float())
TANDEM_SIMPLE_TEST(TestMapping, "mapping", v.is_dict())
TANDEM_SIMPLE_TEST(TestIterable, "iterable",
                   v.is_undefined() || v.is_string() || v.is_list() ||
                       v.is_dict())
TANDEM_SIMPLE_TEST(TestSequence, "sequence",
                   v.is_undefined() || v.is_string() || v.is_dict() ||
                       (v.is_list() && !v.is_iterator()))
TANDEM_SIMPLE_TEST(TestCallable, "callable",
                   v.is_callable() || v.is_undefined())
TANDEM_SIMPLE_TEST(TestEscaped, "escaped", false)

absl::StatusOr<bool> CaseTest(Interpreter& in, const Value& v, CallArgs& a,
                              bool upper) {
  TANDEM_RETURN_IF_ERROR(NoArgs(upper ? "upper" : "lower", a).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, in.Str(v));
  bool cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (upper ? (IsPyLower(c) || (IsPyCased(c) && !IsPyUpper(c)))
              : (IsPyUpper(c) || (IsPyCased(c) && !IsPyLower(c)))) {
      return false;
    }
    if (IsPyCased(c)) cased = true;
  }
  return cased;
}
absl::StatusOr<bool> TestLower(Interpreter& in, const Value& v, CallArgs& a) {
  return CaseTest(in, v, a, false);
}
absl::StatusOr<bool> TestUpper(Interpreter& in, const Value& v, CallArgs& a) {
  return CaseTest(in, v, a, true);
}

absl::StatusOr<Value> Modulo(Interpreter& in, const Value& v, const Value& d) {
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  if (!v.is_number() || !d.is_number()) {
    return Interpreter::TypeError(Cat("unsupported operand type(s) for %: '",
                                      TypeName(v), "' and '", TypeName(d),
                                      "'"));
  }
  if (d.float_value() == 0) {
    return absl::InvalidArgumentError(
        "ZeroDivisionError: integer division or modulo by zero");
  }
  if (v.is_integral() && d.is_integral()) {
    int64_t r = d.int_value() == -1 ? 0 : v.int_value() % d.int_value();
    if (r != 0 && ((r < 0) != (d.int_value() < 0))) r += d.int_value();
    return Value::Int(r);
  }
  double r = std::fmod(v.float_value(), d.float_value());
  if (r != 0 && ((r < 0) != (d.float_value() < 0))) r += d.float_value();
  return Value::Float(r);
}

absl::StatusOr<bool> TestOdd(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_RETURN_IF_ERROR(NoArgs("odd", a).status());
  TANDEM_ASSIGN_OR_RETURN(Value m, Modulo(in, v, Value::Int(2)));
  return Equals(m, Value::Int(1));
}
absl::StatusOr<bool> TestEven(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_RETURN_IF_ERROR(NoArgs("even", a).status());
  TANDEM_ASSIGN_OR_RETURN(Value m, Modulo(in, v, Value::Int(2)));
  return Equals(m, Value::Int(0));
}
absl::StatusOr<bool> TestDivisibleBy(Interpreter& in, const Value& v,
                                     CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("divisibleby", a, {"num"}, 1));
  TANDEM_ASSIGN_OR_RETURN(Value m, Modulo(in, v, b.get(0)));
  return Equals(m, Value::Int(0));
}

template <int kOp>
absl::StatusOr<bool> TestCompare(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("compare", a, {"other"}, 1));
  const Value& o = b.get(0);
  if (kOp == 0) return Equals(v, o);
  if (kOp == 1) return !Equals(v, o);
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  if (o.is_undefined()) return Interpreter::UndefinedError(o);
  auto c = Compare(v, o);
  if (!c.ok()) return c.status();
  (void)in;
  switch (kOp) {
    case 2:
      return *c < 0;
    case 3:
      return *c <= 0;
    case 4:
      return *c > 0;
    default:
      return *c >= 0;
  }
}

absl::StatusOr<bool> TestIn(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("in", a, {"seq"}, 1));
  return in.Contains(b.get(0), v);
}

absl::StatusOr<bool> TestSameAs(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("sameas", a, {"other"}, 1));
  const Value& o = b.get(0);
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_bool() || v.is_undefined())
    return Equals(v, o) || v.is_undefined();
  if (v.is_list()) return &v.list() == &o.list();
  if (v.is_dict()) return &v.dict() == &o.dict();
  if (v.is_namespace()) return &v.ns() == &o.ns();
  if (v.is_callable()) return &v.callable() == &o.callable();
  if (v.is_string()) return &v.str() == &o.str();
  return Equals(v, o) && v.is_int() && v.int_value() >= -5 &&
         v.int_value() <= 256;
}

absl::StatusOr<bool> TestFilter(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_RETURN_IF_ERROR(NoArgs("filter", a).status());
  return v.is_string() && FindFilter(v.str()) != nullptr;
}
absl::StatusOr<bool> TestTest(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_RETURN_IF_ERROR(NoArgs("test", a).status());
  return v.is_string() && FindTest(v.str()) != nullptr;
}

// ---- globals ----

absl::StatusOr<Value> GlobalRange(Interpreter& in, CallArgs& a) {
  if (!a.kwargs.empty())
    return Interpreter::TypeError("range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3) {
    return Interpreter::TypeError(
        Cat("range expected at most 3 arguments, got ", a.args.size()));
  }
  std::array<int64_t, 3> v = {0, 0, 1};
  for (size_t i = 0; i < a.args.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(int64_t x, ToIndex("range", a.args[i]));
    v[a.args.size() == 1 ? 1 : i] = x;
  }
  const int64_t start = v[0], stop = v[1], step = v[2];
  if (step == 0)
    return Interpreter::ValueError("range() arg 3 must not be zero");
  const __int128 span =
      step > 0 ? (__int128)stop - start : (__int128)start - stop;
  const __int128 abs_step = step > 0 ? step : -(__int128)step;
  const __int128 n = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (n > 100000) {
    return absl::InvalidArgumentError(
        "OverflowError: Range too big. The sandbox blocks ranges larger than "
        "MAX_RANGE (100000).");
  }
  TANDEM_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(n)));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
    out.push_back(Value::Int(start + i * step));
  return Value::Range(start, stop, step, std::move(out));
}

// dict(*args, **kwargs) as Python builds it.
absl::StatusOr<std::vector<std::pair<Value, Value>>> DictArgs(
    Interpreter& in, std::string_view fn, CallArgs& a) {
  if (a.args.size() > 1) {
    return Interpreter::TypeError(
        Cat(fn, " expected at most 1 argument, got ", a.args.size()));
  }
  std::vector<std::pair<Value, Value>> items;
  auto put = [&items, &in](Value k, Value v) -> absl::Status {
    TANDEM_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(items.size() / 4)));
    for (auto& kv : items) {
      if (Equals(kv.first, k)) {
        kv.second = std::move(v);
        return absl::OkStatus();
      }
    }
    items.emplace_back(std::move(k), std::move(v));
    return absl::OkStatus();
  };
  if (!a.args.empty()) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().items)
        TANDEM_RETURN_IF_ERROR(put(k, v));
    } else {
      TANDEM_ASSIGN_OR_RETURN(std::vector<Value> pairs, in.Iterate(src));
      for (const Value& p : pairs) {
        TANDEM_ASSIGN_OR_RETURN(std::vector<Value> kv, in.Iterate(p));
        if (kv.size() != 2) {
          return Interpreter::ValueError(
              Cat("dictionary update sequence element has length ", kv.size(),
                  "; 2 is required"));
        }
        TANDEM_RETURN_IF_ERROR(put(kv[0], kv[1]));
      }
    }
  }
  for (auto& [k, v] : a.kwargs)
    TANDEM_RETURN_IF_ERROR(put(Value::String(k), v));
  return items;
}

absl::StatusOr<Value> GlobalDict(Interpreter& in, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(auto items, DictArgs(in, "dict", a));
  return Value::Dict(std::move(items));
}

absl::StatusOr<Value> GlobalNamespace(Interpreter& in, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(auto items, DictArgs(in, "namespace", a));
  std::vector<std::pair<std::string, Value>> attrs;
  for (auto& [k, v] : items) {
    if (!k.is_string())
      return Interpreter::TypeError(
          "namespace attribute names must be strings");
    if (!k.str().empty() && k.str()[0] == '_') {
      return absl::InvalidArgumentError(
          Cat("SecurityError: Chat templates cannot store underscore-prefixed "
              "attributes on a "
              "namespace, but got '",
              k.str(), "'. Please rename the attribute."));
    }
    attrs.emplace_back(k.str(), std::move(v));
  }
  Value ns = Value::Namespace(std::move(attrs));
  in.TrackNamespace(ns);
  return ns;
}

absl::StatusOr<Value> GlobalRaise(Interpreter& in, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b, BoundArgs::Bind("raise_exception", a, {"message"}, 1));
  TANDEM_ASSIGN_OR_RETURN(std::string msg, in.Str(b.get(0)));
  return absl::InvalidArgumentError(msg);
}

absl::StatusOr<Value> GlobalStrftimeNow(Interpreter& in, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("strftime_now", a, {"format"}, 1));
  if (!b.get(0).is_string()) {
    return Interpreter::TypeError("strftime() argument 1 must be str");
  }
  const std::string& fmt = b.get(0).str();
  if (fmt.empty()) return Value::String("");
  TANDEM_RETURN_IF_ERROR(in.ChargeBytes(fmt.size() * 16));
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string buf(fmt.size() * 16 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return Value::String(std::move(buf));
}

}  // namespace

TestFn FindTest(std::string_view name) {
  static const auto* const kTests =
      new absl::flat_hash_map<std::string_view, TestFn>{
          {"defined", TestDefined},     {"undefined", TestUndefined},
          {"none", TestNone},           {"boolean", TestBoolean},
          {"true", TestTrue},           {"false", TestFalse},
          {"string", TestString},       {"number", TestNumber},
          {"integer", TestInteger},     {"float", TestFloat},
          {"mapping", TestMapping},     {"iterable", TestIterable},
          {"sequence", TestSequence},   {"callable", TestCallable},
          {"escaped", TestEscaped},     {"lower", TestLower},
          {"upper", TestUpper},         {"odd", TestOdd},
          {"even", TestEven},           {"divisibleby", TestDivisibleBy},
          {"eq", TestCompare<0>},       {"equalto", TestCompare<0>},
          {"==", TestCompare<0>},       {"ne", TestCompare<1>},
          {"!=", TestCompare<1>},       {"lt", TestCompare<2>},
          {"lessthan", TestCompare<2>}, {"<", TestCompare<2>},
          {"le", TestCompare<3>},       {"<=", TestCompare<3>},
          {"gt", TestCompare<4>},       {"greaterthan", TestCompare<4>},
          {">", TestCompare<4>},        {"ge", TestCompare<5>},
          {">=", TestCompare<5>},       {"in", TestIn},
          {"sameas", TestSameAs},       {"filter", TestFilter},
          {"test", TestTest},
      };
  auto it = kTests->find(name);
  return it == kTests->end() ? nullptr : it->second;
}

std::optional<Value> FindGlobal(std::string_view name) {
  static const auto* const kGlobals =
      new absl::flat_hash_map<std::string_view, Value>{
          {"range", Value::Callable("range", GlobalRange)},
          {"dict", Value::Callable("dict", GlobalDict)},
          {"namespace", Value::Callable("namespace", GlobalNamespace)},
          {"raise_exception", Value::Callable("raise_exception", GlobalRaise)},
          {"strftime_now", Value::Callable("strftime_now", GlobalStrftimeNow)},
      };
  auto it = kGlobals->find(name);
  if (it == kGlobals->end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<BoundArgs> BoundArgs::Bind(
    std::string_view fn, const CallArgs& call,
    std::initializer_list<std::string_view> params, size_t required) {
  BoundArgs b;
  b.vals_.resize(params.size());
  if (call.args.size() > params.size()) {
    return Interpreter::TypeError(Cat(fn, "() takes at most ", params.size(),
                                      " argument(s) (", call.args.size(),
                                      " given)"));
  }
  for (size_t i = 0; i < call.args.size(); ++i) b.vals_[i] = call.args[i];
  for (const auto& [key, value] : call.kwargs) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) {
      return Interpreter::TypeError(
          Cat(fn, "() got an unexpected keyword argument '", key, "'"));
    }
    auto& slot = b.vals_[static_cast<size_t>(it - params.begin())];
    if (slot) {
      return Interpreter::TypeError(
          Cat(fn, "() got multiple values for argument '", key, "'"));
    }
    slot = value;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!b.vals_[i]) {
      return Interpreter::TypeError(Cat(fn, "() missing required argument '",
                                        *(params.begin() + i), "'"));
    }
  }
  return b;
}

absl::StatusOr<int64_t> ToIndex(std::string_view what, const Value& v) {
  if (v.is_integral()) return v.int_value();
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  return Interpreter::TypeError(
      Cat("'", TypeName(v), "' object cannot be interpreted as an integer (in ",
          what, ")"));
}

absl::StatusOr<Value> GetAttrPath(Interpreter& in, const Value& item,
                                  const Value& attribute) {
  if (attribute.is_none() || attribute.is_undefined()) return item;
  if (!attribute.is_string()) return in.GetItem(item, attribute);
  Value cur = item;
  for (absl::string_view piece : absl::StrSplit(attribute.str(), '.')) {
    const std::string_view part(piece.data(), piece.size());
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     absl::ascii_isdigit);
    Value key;
    if (digits && part.size() < 18) {
      int64_t n = 0;
      for (char c : part) n = n * 10 + (c - '0');
      key = Value::Int(n);
    } else {
      key = Value::String(std::string(part));
    }
    TANDEM_ASSIGN_OR_RETURN(cur, in.GetItem(cur, key));
  }
  return cur;
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return 0;
    case ValueKind::kString:
      return static_cast<int64_t>(CodePointCount(v.str()));
    case ValueKind::kList:
      if (!v.is_iterator()) return static_cast<int64_t>(v.list().items.size());
      break;
    case ValueKind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      break;
  }
  return Interpreter::TypeError(
      Cat("object of type '", TypeName(v), "' has no len()"));
}

}  // namespace tandem::jinja
