// Expression evaluation: names, literals, attribute/item access, slicing,
// calls, filters and tests. The operators themselves are in operators.cc.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/interpreter.h"
#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

absl::Status Overflow() {
  return absl::InvalidArgumentError(
      "OverflowError: integer result does not fit in 64 bits (not supported)");
}

}  // namespace

Value Interpreter::Lookup(std::string_view name) {
  for (Frame* f = frame_.get(); f != nullptr; f = f->parent.get()) {
    if (Value* v = f->Find(name)) return *v;
  }
  if (auto it = globals_.find(absl::string_view(name.data(), name.size()));
      it != globals_.end())
    return it->second;
  if (auto g = FindGlobal(name)) return *g;
  return Value::Undefined(Cat("'", name, "' is undefined"));
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  TANDEM_RETURN_IF_ERROR(Charge(1));
  TANDEM_RETURN_IF_ERROR(CheckStack());
  absl::StatusOr<Value> r = EvalInner(e);
  if (!r.ok()) return At(r.status(), e.offset);
  if (r->is_list() || r->is_dict()) {
    if (auto st = CheckValue(*r); !st.ok()) return At(st, e.offset);
  }
  return r;
}

absl::StatusOr<Value> Interpreter::EvalInner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return Lookup(e.name);
    case ExprKind::kNsRef:
      return absl::InvalidArgumentError("namespace reference used as a value");
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const ExprPtr& x : e.items) {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*x));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items), e.kind == ExprKind::kTuple
                                               ? ListKind::kTuple
                                               : ListKind::kList);
    }
    case ExprKind::kDict: {
      std::vector<std::pair<Value, Value>> items;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        TANDEM_ASSIGN_OR_RETURN(Value k, Eval(*e.items[i]));
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.items[i + 1]));
        if (k.is_list() && !k.is_tuple())
          return TypeError("unhashable type: 'list'");
        if (k.is_dict()) return TypeError("unhashable type: 'dict'");
        bool replaced = false;
        for (auto& kv : items) {
          if (Equals(kv.first, k)) {
            kv.second = v;
            replaced = true;
            break;
          }
        }
        if (!replaced) items.emplace_back(std::move(k), std::move(v));
      }
      return Value::Dict(std::move(items));
    }
    case ExprKind::kGetAttr: {
      TANDEM_ASSIGN_OR_RETURN(Value obj, Eval(*e.a));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      TANDEM_ASSIGN_OR_RETURN(Value obj, Eval(*e.a));
      if (e.b->kind == ExprKind::kSlice) return EvalSlice(obj, *e.b);
      TANDEM_ASSIGN_OR_RETURN(Value key, Eval(*e.b));
      return GetItem(obj, key);
    }
    case ExprKind::kSlice:
      return absl::InvalidArgumentError("slice used outside of a subscript");
    case ExprKind::kCall:
      return EvalCall(e);
    case ExprKind::kFilter: {
      Value v;
      if (e.a) {
        TANDEM_ASSIGN_OR_RETURN(v, Eval(*e.a));
      }
      TANDEM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.call));
      return CallFilter(e.name, v, std::move(args));
    }
    case ExprKind::kTest: {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.a));
      TANDEM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.call));
      TANDEM_ASSIGN_OR_RETURN(bool r, CallTest(e.name, v, std::move(args)));
      return Value::Bool(r);
    }
    case ExprKind::kUnary: {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.a));
      if (e.op == Op::kNot) return Value::Bool(!Truthy(v));
      if (v.is_undefined()) return UndefinedError(v);
      if (v.is_float())
        return Value::Float(e.op == Op::kNeg ? -v.float_value()
                                             : v.float_value());
      if (v.is_integral()) {
        const int64_t i = v.int_value();
        if (e.op == Op::kPos) return Value::Int(i);
        if (i == std::numeric_limits<int64_t>::min()) return Overflow();
        return Value::Int(-i);
      }
      return TypeError(Cat("bad operand type for unary ",
                           e.op == Op::kNeg ? "-" : "+", ": '", TypeName(v),
                           "'"));
    }
    case ExprKind::kBinary:
      return EvalBinary(e);
    case ExprKind::kConcat: {
      std::string out;
      for (const ExprPtr& x : e.items) {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*x));
        TANDEM_RETURN_IF_ERROR(AppendStr(v, &out, limits_.max_output_bytes));
      }
      TANDEM_RETURN_IF_ERROR(ChargeBytes(out.size()));
      return Value::String(std::move(out));
    }
    case ExprKind::kCompare:
      return EvalCompare(e);
    case ExprKind::kCond: {
      TANDEM_ASSIGN_OR_RETURN(Value c, Eval(*e.a));
      if (Truthy(c)) return Eval(*e.b);
      if (e.c) return Eval(*e.c);
      return Value::Undefined(
          "the inline if-expression evaluated to false and no else section was "
          "defined.");
    }
  }
  return absl::InternalError("unknown expression");
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const CallArgsExpr& call) {
  CallArgs out;
  out.args.reserve(call.args.size());
  for (const ExprPtr& x : call.args) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*x));
    out.args.push_back(std::move(v));
  }
  for (const auto& [key, x] : call.kwargs) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*x));
    out.kwargs.emplace_back(key, std::move(v));
  }
  if (call.dyn_args) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*call.dyn_args));
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> extra, Iterate(v));
    for (Value& x : extra) out.args.push_back(std::move(x));
  }
  if (call.dyn_kwargs) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*call.dyn_kwargs));
    if (!v.is_dict()) return TypeError("argument after ** must be a mapping");
    for (const auto& [k, x] : v.dict().items) {
      if (!k.is_string()) return TypeError("keywords must be strings");
      out.kwargs.emplace_back(k.str(), x);
    }
  }
  return out;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  Value callee;
  if (e.a->kind == ExprKind::kGetAttr) {
    TANDEM_ASSIGN_OR_RETURN(Value obj, Eval(*e.a->a));
    if (!obj.is_undefined() &&
        FindMethod(obj, e.a->name) == MethodKind::kSafe) {
      TANDEM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.call));
      TANDEM_ASSIGN_OR_RETURN(Value r, CallMethod(*this, obj, e.a->name, args));
      if (r.is_string()) TANDEM_RETURN_IF_ERROR(ChargeBytes(r.str().size()));
      return r;
    }
    auto attr = GetAttr(obj, e.a->name);
    if (!attr.ok()) return At(attr.status(), e.a->offset);
    callee = std::move(*attr);
  } else {
    TANDEM_ASSIGN_OR_RETURN(callee, Eval(*e.a));
  }
  TANDEM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.call));
  return Call(callee, std::move(args));
}

absl::StatusOr<Value> Interpreter::Call(const Value& fn, CallArgs args) {
  if (fn.is_callable()) return fn.callable().fn(*this, args);
  if (fn.is_undefined()) return UndefinedError(fn);
  return TypeError(Cat("'", TypeName(fn), "' object is not callable"));
}

absl::StatusOr<Value> Interpreter::CallFilter(std::string_view name,
                                              const Value& v, CallArgs args) {
  FilterFn f = FindFilter(name);
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        Cat("TemplateRuntimeError: No filter named '", name, "' found."));
  }
  if (v.is_string()) TANDEM_RETURN_IF_ERROR(ChargeScan(v.str().size()));
  TANDEM_ASSIGN_OR_RETURN(Value r, f(*this, v, args));
  if (r.is_string() && !(v.is_string() && &r.str() == &v.str())) {
    TANDEM_RETURN_IF_ERROR(ChargeBytes(r.str().size()));
  }
  return r;
}

absl::StatusOr<bool> Interpreter::CallTest(std::string_view name,
                                           const Value& v, CallArgs args) {
  TestFn t = FindTest(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        Cat("TemplateRuntimeError: No test named '", name, "' found."));
  }
  return t(*this, v, args);
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  TANDEM_ASSIGN_OR_RETURN(Value a, Eval(*e.a));
  if (e.op == Op::kAnd) return Truthy(a) ? Eval(*e.b) : a;
  if (e.op == Op::kOr) return Truthy(a) ? a : Eval(*e.b);
  TANDEM_ASSIGN_OR_RETURN(Value b, Eval(*e.b));
  if (e.neg_pow_quirk && a.is_number() && !a.is_bool() && a.float_value() < 0) {
    const Value pos = a.is_int() ? Value::Int(-a.int_value())
                                 : Value::Float(-a.float_value());
    if (a.is_int() && a.int_value() == std::numeric_limits<int64_t>::min())
      return Overflow();
    TANDEM_ASSIGN_OR_RETURN(Value r, Arith(Op::kPow, pos, b));
    return r.is_int() ? Value::Int(-r.int_value())
                      : Value::Float(-r.float_value());
  }
  return Arith(e.op, a, b);
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e) {
  TANDEM_ASSIGN_OR_RETURN(Value left, Eval(*e.a));
  for (const auto& [op, rhs] : e.compare) {
    TANDEM_ASSIGN_OR_RETURN(Value right, Eval(*rhs));
    TANDEM_ASSIGN_OR_RETURN(bool ok, CompareOp(op, left, right));
    if (!ok) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Value& obj,
                                             const Expr& slice) {
  std::optional<int64_t> parts[3];
  const Expr* exprs[3] = {slice.a.get(), slice.b.get(), slice.c.get()};
  bool bad_index = false;
  for (int i = 0; i < 3; ++i) {
    if (exprs[i] == nullptr) continue;
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*exprs[i]));
    if (v.is_integral()) {
      parts[i] = v.int_value();
    } else if (!v.is_none()) {
      bad_index = true;
    }
  }
  if (obj.is_undefined()) return UndefinedError(obj);
  const bool is_str = obj.is_string();
  if (bad_index && (is_str || obj.is_list())) {
    return TypeError(
        "slice indices must be integers or None or have an __index__ method");
  }
  if (bad_index || !(is_str || (obj.is_list() && !obj.is_iterator()))) {
    return Value::Undefined(
        Cat("'", TypeName(obj), " object' has no element slice"));
  }
  int64_t step = parts[2].value_or(1);
  if (step == 0) return ValueError("slice step cannot be zero");
  if (step == std::numeric_limits<int64_t>::min()) step += 1;  // same elements
  const auto len = static_cast<int64_t>(is_str ? CodePointCount(obj.str())
                                               : obj.list().items.size());
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x = x < -len ? (step < 0 ? -1 : 0) : x + len;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t start = adjust(parts[0], step < 0 ? len - 1 : 0);
  const int64_t stop = adjust(parts[1], step < 0 ? -1 : len);
  int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
  if (step < 0 && start > stop) count = (start - stop - 1) / (-step) + 1;
  TANDEM_RETURN_IF_ERROR(Charge(count / 4));
  if (is_str) {
    const std::string& s = obj.str();
    TANDEM_RETURN_IF_ERROR(ChargeScan(s.size()));
    if (step == 1 || count == 0) {  // a contiguous run: find its byte range
      size_t b = 0;
      char32_t c;
      for (int64_t k = 0; k < start && count > 0; ++k)
        b += DecodeUtf8At(s, b, &c);
      size_t e = b;
      for (int64_t k = 0; k < count; ++k) e += DecodeUtf8At(s, e, &c);
      return Value::String(s.substr(b, e - b));
    }
    const std::u32string chars = DecodeUtf8(s);
    std::u32string out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0, i = start; k < count; ++k) {
      out.push_back(chars[static_cast<size_t>(i)]);
      if (k + 1 < count) i += step;
    }
    return Value::String(EncodeUtf8(out));
  }
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0, i = start; k < count; ++k) {
    out.push_back(obj.list().items[static_cast<size_t>(i)]);
    if (k + 1 < count) i += step;
  }
  if (obj.is_range()) {  // a range's slice is a range
    const ListData& r = obj.list();
    int64_t a, b, c;
    if (!__builtin_mul_overflow(start, r.range_step, &a) &&
        !__builtin_add_overflow(a, r.range_start, &a) &&
        !__builtin_mul_overflow(stop, r.range_step, &b) &&
        !__builtin_add_overflow(b, r.range_start, &b) &&
        !__builtin_mul_overflow(r.range_step, step, &c)) {
      return Value::Range(a, b, c, std::move(out));
    }
  }
  return Value::List(std::move(out),
                     obj.is_tuple() ? ListKind::kTuple : ListKind::kList);
}

absl::StatusOr<Value> Interpreter::GetAttr(const Value& obj,
                                           std::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  switch (FindMethod(obj, name)) {
    case MethodKind::kSafe: {
      std::string n(name);
      return Value::Callable(n, [obj, n](Interpreter& in, CallArgs& args) {
        return CallMethod(in, obj, n, args);
      });
    }
    case MethodKind::kUnsafe:
      return Value::Undefined(Cat("access to attribute '", name, "' of '",
                                  TypeName(obj), "' object is unsafe."));
    case MethodKind::kNone:
      break;
  }
  if (obj.is_dict()) {
    TANDEM_RETURN_IF_ERROR(
        Charge(static_cast<int64_t>(obj.dict().items.size() / 32)));
    if (const Value* v = obj.dict().Find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.ns().Find(name)) return *v;
  }
  if (obj.is_none())
    return Value::Undefined(Cat("None has no attribute '", name, "'"));
  return Value::Undefined(
      Cat("'", TypeName(obj), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) {
    TANDEM_RETURN_IF_ERROR(
        Charge(static_cast<int64_t>(obj.dict().items.size() / 32)));
    if (!(key.is_list() && !key.is_tuple()) && !key.is_dict()) {
      if (const Value* v = obj.dict().Find(key)) return *v;
    }
  } else if ((obj.is_string() || (obj.is_list() && !obj.is_iterator())) &&
             key.is_integral()) {
    int64_t i = key.int_value();
    if (obj.is_string()) {
      const std::string& s = obj.str();
      TANDEM_RETURN_IF_ERROR(ChargeScan(s.size()));
      const auto n = static_cast<int64_t>(CodePointCount(s));
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        if (n == static_cast<int64_t>(s.size()))
          return Value::String(s.substr(static_cast<size_t>(i), 1));
        size_t pos = 0;
        char32_t c;
        for (int64_t k = 0; k < i; ++k) pos += DecodeUtf8At(s, pos, &c);
        return Value::String(s.substr(pos, DecodeUtf8At(s, pos, &c)));
      }
    } else {
      const auto n = static_cast<int64_t>(obj.list().items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list().items[static_cast<size_t>(i)];
    }
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  std::string shown;
  TANDEM_RETURN_IF_ERROR(AppendRepr(key, &shown, 4096));
  if (obj.is_none())
    return Value::Undefined(Cat("None has no element ", shown));
  return Value::Undefined(
      Cat("'", TypeName(obj), " object' has no element ", shown));
}

absl::StatusOr<std::vector<Value>> Interpreter::Iterate(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return std::vector<Value>{};
    case ValueKind::kList:
      TANDEM_RETURN_IF_ERROR(
          Charge(static_cast<int64_t>(v.list().items.size() / 4)));
      return v.list().items;
    case ValueKind::kDict: {
      TANDEM_RETURN_IF_ERROR(
          Charge(static_cast<int64_t>(v.dict().items.size() / 4)));
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case ValueKind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      TANDEM_RETURN_IF_ERROR(Charge(static_cast<int64_t>(s.size() / 16)));
      if (static_cast<int64_t>(s.size()) > limits_.max_container_nodes &&
          static_cast<int64_t>(CodePointCount(s)) >
              limits_.max_container_nodes) {
        return absl::InvalidArgumentError(
            Cat("iterating a string of more than ", limits_.max_container_nodes,
                " characters"));
      }
      chars.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        char32_t c;
        const size_t n = DecodeUtf8At(s, i, &c);
        chars.push_back(Value::String(s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    default:
      return TypeError(Cat("'", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<std::string> Interpreter::Str(const Value& v) {
  return ToStr(v, limits_.max_output_bytes);
}

absl::StatusOr<bool> Interpreter::Contains(const Value& container,
                                           const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kString:
      if (!item.is_string()) {
        return TypeError(
            Cat("'in <string>' requires string as left operand, not ",
                TypeName(item)));
      }
      TANDEM_RETURN_IF_ERROR(ChargeScan(container.str().size()));
      return container.str().find(item.str()) != std::string::npos;
    case ValueKind::kList:
      TANDEM_RETURN_IF_ERROR(Charge(container.nodes() / 4));
      for (const Value& x : container.list().items) {
        if (Equals(x, item)) return true;
      }
      return false;
    case ValueKind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) {
        return TypeError(Cat("unhashable type: '", TypeName(item), "'"));
      }
      TANDEM_RETURN_IF_ERROR(
          Charge(static_cast<int64_t>(container.dict().items.size() / 4)));
      return container.dict().Find(item) != nullptr;
    default:
      return TypeError(
          Cat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

}  // namespace tandem::jinja
