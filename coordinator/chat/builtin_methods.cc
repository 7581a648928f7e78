// Methods of str, dict and list values.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

using StrSet = absl::flat_hash_set<std::string_view>;

const StrSet& StrMethods() {
  static const auto* const k = new StrSet{
      "startswith", "endswith",   "strip",        "lstrip",      "rstrip",
      "split",      "rsplit",     "splitlines",   "upper",       "lower",
      "title",      "capitalize", "swapcase",     "casefold",    "replace",
      "find",       "rfind",      "index",        "rindex",      "count",
      "join",       "format",     "isdigit",      "isdecimal",   "isnumeric",
      "isalpha",    "isalnum",    "isspace",      "isupper",     "islower",
      "istitle",    "center",     "ljust",        "rjust",       "zfill",
      "partition",  "rpartition", "removeprefix", "removesuffix"};
  return *k;
}

// Python's slice-index normalisation for optional start/end arguments, in
// code points; returns the byte range of s they select.
absl::Status SubRange(const std::string& s, const BoundArgs& b, size_t first,
                      size_t* lo, size_t* hi) {
  *lo = 0;
  *hi = s.size();
  if (!b.has(first) && !b.has(first + 1)) return absl::OkStatus();
  const std::u32string u = DecodeUtf8(s);
  const auto n = static_cast<int64_t>(u.size());
  auto norm = [n](int64_t x) {
    return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n);
  };
  int64_t start = 0, end = n;
  if (b.has(first) && !b.get(first).is_none()) {
    TANDEM_ASSIGN_OR_RETURN(start, ToIndex("slice", b.get(first)));
  }
  if (b.has(first + 1) && !b.get(first + 1).is_none()) {
    TANDEM_ASSIGN_OR_RETURN(end, ToIndex("slice", b.get(first + 1)));
  }
  start = norm(start);
  end = std::max(start, norm(end));
  *lo = EncodeUtf8(u.substr(0, static_cast<size_t>(start))).size();
  *hi = *lo + EncodeUtf8(u.substr(static_cast<size_t>(start),
                                  static_cast<size_t>(end - start)))
                  .size();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> OptStr(std::string_view fn,
                                                  const BoundArgs& b,
                                                  size_t i) {
  if (!b.has(i) || b.get(i).is_none()) return std::optional<std::string>();
  if (!b.get(i).is_string()) {
    return Interpreter::TypeError(
        Cat(fn, " arg must be None or str, not ", TypeName(b.get(i))));
  }
  return std::optional<std::string>(b.get(i).str());
}

absl::StatusOr<std::string> NeedStr(std::string_view fn, const Value& v) {
  if (!v.is_string()) {
    return Interpreter::TypeError(
        Cat(fn, "() argument must be str, not ", TypeName(v)));
  }
  return v.str();
}

Value StrList(std::vector<std::string> parts, ListKind kind = ListKind::kList) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::String(std::move(p)));
  return Value::List(std::move(out), kind);
}

template <typename Pred>
Value AllChars(const std::string& s, Pred pred) {
  if (s.empty()) return Value::Bool(false);
  for (char32_t c : DecodeUtf8(s)) {
    if (!pred(c)) return Value::Bool(false);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> CallStrMethod(Interpreter& in, const std::string& s,
                                    std::string_view name, CallArgs& a) {
  TANDEM_RETURN_IF_ERROR(in.ChargeScan(s.size()));
  if (name == "format") {
    TANDEM_ASSIGN_OR_RETURN(std::string r, StrFormat(in, s, a));
    TANDEM_RETURN_IF_ERROR(in.ChargeBytes(r.size()));
    return Value::String(std::move(r));
  }
  if (name == "startswith" || name == "endswith") {
    TANDEM_ASSIGN_OR_RETURN(
        BoundArgs b, BoundArgs::Bind(name, a, {"prefix", "start", "end"}, 1));
    size_t lo, hi;
    TANDEM_RETURN_IF_ERROR(SubRange(s, b, 1, &lo, &hi));
    const std::string_view sub(s.data() + lo, hi - lo);
    std::vector<Value> cands;
    if (b.get(0).is_tuple()) {
      cands = b.get(0).list().items;
    } else {
      cands.push_back(b.get(0));
    }
    for (const Value& c : cands) {
      if (!c.is_string()) {
        return Interpreter::TypeError(
            Cat(name, " first arg must be str or a tuple of str, not ",
                TypeName(c)));
      }
      const std::string& p = c.str();
      const bool hit = name == "startswith"
                           ? sub.substr(0, p.size()) == p
                           : sub.size() >= p.size() &&
                                 sub.substr(sub.size() - p.size()) == p;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {"chars"}));
    TANDEM_ASSIGN_OR_RETURN(auto chars, OptStr(name, b, 0));
    return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                            BoundArgs::Bind(name, a, {"sep", "maxsplit"}));
    TANDEM_ASSIGN_OR_RETURN(auto sep, OptStr(name, b, 0));
    if (sep && sep->empty()) return Interpreter::ValueError("empty separator");
    int64_t maxsplit = -1;
    if (b.has(1)) {
      TANDEM_ASSIGN_OR_RETURN(maxsplit, ToIndex(name, b.get(1)));
    }
    return StrList(name == "split" ? PySplit(s, sep, maxsplit)
                                   : PyRSplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                            BoundArgs::Bind(name, a, {"keepends"}));
    return StrList(PySplitLines(s, b.has(0) && Truthy(b.get(0))));
  }
  if (name == "upper" || name == "lower" || name == "title" ||
      name == "capitalize" || name == "swapcase" || name == "casefold") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {}));
    (void)b;
    if (name == "upper") return Value::String(PyUpper(s));
    if (name == "lower" || name == "casefold") return Value::String(PyLower(s));
    if (name == "title") return Value::String(PyTitle(s));
    if (name == "capitalize") return Value::String(PyCapitalize(s));
    return Value::String(PySwapCase(s));
  }
  if (name == "replace") {
    TANDEM_ASSIGN_OR_RETURN(
        BoundArgs b, BoundArgs::Bind(name, a, {"old", "new", "count"}, 2));
    TANDEM_ASSIGN_OR_RETURN(std::string o, NeedStr(name, b.get(0)));
    TANDEM_ASSIGN_OR_RETURN(std::string n, NeedStr(name, b.get(1)));
    int64_t count = -1;
    if (b.has(2)) {
      TANDEM_ASSIGN_OR_RETURN(count, ToIndex(name, b.get(2)));
    }
    if (!o.empty() && n.size() > o.size() &&
        (s.size() / o.size()) * (n.size() - o.size()) >
            in.limits().max_output_bytes) {
      return in.ChargeBytes(in.limits().max_output_bytes + 1);
    }
    std::string r = PyReplace(s, o, n, count);
    TANDEM_RETURN_IF_ERROR(in.ChargeBytes(r.size()));
    return Value::String(std::move(r));
  }
  if (name == "find" || name == "rfind" || name == "index" ||
      name == "rindex" || name == "count") {
    TANDEM_ASSIGN_OR_RETURN(
        BoundArgs b, BoundArgs::Bind(name, a, {"sub", "start", "end"}, 1));
    TANDEM_ASSIGN_OR_RETURN(std::string sub, NeedStr(name, b.get(0)));
    size_t lo, hi;
    TANDEM_RETURN_IF_ERROR(SubRange(s, b, 1, &lo, &hi));
    const std::string_view hay(s.data() + lo, hi - lo);
    if (name == "count") return Value::Int(PyCount(hay, sub));
    int64_t r = PyFind(hay, sub, name[0] == 'r');
    if (r < 0 && (name == "index" || name == "rindex")) {
      return Interpreter::ValueError("substring not found");
    }
    if (r >= 0)
      r += static_cast<int64_t>(CodePointCount(std::string_view(s.data(), lo)));
    return Value::Int(r);
  }
  if (name == "join") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                            BoundArgs::Bind(name, a, {"iterable"}, 1));
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(b.get(0)));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return Interpreter::TypeError(Cat("sequence item ", i,
                                          ": expected str instance, ",
                                          TypeName(items[i]), " found"));
      }
      if (i) out += s;
      out += items[i].str();
      TANDEM_RETURN_IF_ERROR(in.ChargeBytes(out.size() / 8));
    }
    return Value::String(std::move(out));
  }
  if (name.substr(0, 2) == "is") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {}));
    (void)b;
    if (name == "isdigit" || name == "isdecimal") return AllChars(s, IsPyDigit);
    if (name == "isnumeric") return AllChars(s, IsPyDigit);
    if (name == "isalpha") return AllChars(s, IsPyAlpha);
    if (name == "isalnum") return AllChars(s, IsPyAlnum);
    if (name == "isspace") return AllChars(s, IsPySpace);
    bool cased = false, ok = true, prev_cased = false;
    for (char32_t c : DecodeUtf8(s)) {
      if (name == "isupper" &&
          (IsPyLower(c) || (IsPyCased(c) && !IsPyUpper(c))))
        ok = false;
      if (name == "islower" &&
          (IsPyUpper(c) || (IsPyCased(c) && !IsPyLower(c))))
        ok = false;
      if (name == "istitle") {
        if (IsPyUpper(c) && prev_cased) ok = false;
        if (IsPyLower(c) && !prev_cased) ok = false;
      }
      if (IsPyCased(c)) cased = true;
      prev_cased = IsPyCased(c);
    }
    return Value::Bool(ok && cased);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                            BoundArgs::Bind(name, a, {"width", "fillchar"}, 1));
    TANDEM_ASSIGN_OR_RETURN(int64_t width, ToIndex(name, b.get(0)));
    char32_t fill = ' ';
    if (b.has(1)) {
      if (!b.get(1).is_string() || CodePointCount(b.get(1).str()) != 1) {
        return Interpreter::TypeError(
            "The fill character must be exactly one character long");
      }
      DecodeUtf8At(b.get(1).str(), 0, &fill);
    }
    if (width > 0) {
      TANDEM_RETURN_IF_ERROR(in.ChargeBytes(static_cast<size_t>(width)));
      TANDEM_RETURN_IF_ERROR(in.ChargeBytes(static_cast<size_t>(width) * 3));
    }
    return Value::String(PyPad(s, width,
                               name == "center"  ? '^'
                               : name == "ljust" ? '<'
                                                 : '>',
                               fill));
  }
  if (name == "zfill") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                            BoundArgs::Bind(name, a, {"width"}, 1));
    TANDEM_ASSIGN_OR_RETURN(int64_t width, ToIndex(name, b.get(0)));
    if (width > 0)
      TANDEM_RETURN_IF_ERROR(in.ChargeBytes(static_cast<size_t>(width)));
    const auto len = static_cast<int64_t>(CodePointCount(s));
    if (width <= len) return Value::String(s);
    const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    std::string out = sign ? s.substr(0, 1) : "";
    out += std::string(static_cast<size_t>(width - len), '0');
    out += sign ? s.substr(1) : s;
    return Value::String(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {"sep"}, 1));
    TANDEM_ASSIGN_OR_RETURN(std::string sep, NeedStr(name, b.get(0)));
    if (sep.empty()) return Interpreter::ValueError("empty separator");
    const size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return name == "partition" ? StrList({s, "", ""}, ListKind::kTuple)
                                 : StrList({"", "", s}, ListKind::kTuple);
    }
    return StrList({s.substr(0, p), sep, s.substr(p + sep.size())},
                   ListKind::kTuple);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                            BoundArgs::Bind(name, a, {"affix"}, 1));
    TANDEM_ASSIGN_OR_RETURN(std::string x, NeedStr(name, b.get(0)));
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) {
      return Value::String(s.substr(x.size()));
    }
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::String(s.substr(0, s.size() - x.size()));
    }
    return Value::String(s);
  }
  return Interpreter::TypeError(Cat("str has no method '", name, "'"));
}

absl::StatusOr<Value> CallDictMethod(Interpreter& in, const Value& self,
                                     std::string_view name, CallArgs& a) {
  const DictData& d = self.dict();
  TANDEM_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(d.items.size() / 4)));
  if (name == "get") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                            BoundArgs::Bind("get", a, {"key", "default"}, 1));
    const Value& k = b.get(0);
    if ((k.is_list() && !k.is_tuple()) || k.is_dict()) {
      return Interpreter::TypeError(
          Cat("unhashable type: '", TypeName(k), "'"));
    }
    if (const Value* v = d.Find(k)) return *v;
    return b.get_or(1, Value::None());
  }
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {}));
  (void)b;
  if (name == "copy") return self;
  std::vector<Value> out;
  out.reserve(d.items.size());
  for (const auto& [k, v] : d.items) {
    if (name == "items") {
      out.push_back(Value::List({k, v}, ListKind::kTuple));
    } else {
      out.push_back(name == "keys" ? k : v);
    }
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> CallListMethod(Interpreter& in, const Value& self,
                                     std::string_view name, CallArgs& a) {
  const auto& items = self.list().items;
  TANDEM_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(items.size() / 4)));
  if (name == "copy") {
    TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {}));
    (void)b;
    return self;
  }
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {"value"}, 1));
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!Equals(items[i], b.get(0))) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return Interpreter::ValueError("value is not in list");
  return Value::Int(count);
}

}  // namespace

MethodKind FindMethod(const Value& self, std::string_view name) {
  if (self.is_string())
    return StrMethods().contains(name) ? MethodKind::kSafe : MethodKind::kNone;
  if (self.is_dict()) {
    if (name == "items" || name == "keys" || name == "values" ||
        name == "get" || name == "copy") {
      return MethodKind::kSafe;
    }
    if (name == "pop" || name == "popitem" || name == "setdefault" ||
        name == "update" || name == "clear") {
      return MethodKind::kUnsafe;
    }
  }
  if (self.is_list() && !self.is_iterator()) {
    if (name == "index" || name == "count") return MethodKind::kSafe;
    if (self.list().kind == ListKind::kList) {
      if (name == "copy") return MethodKind::kSafe;
      if (name == "append" || name == "extend" || name == "insert" ||
          name == "pop" || name == "remove" || name == "reverse" ||
          name == "sort" || name == "clear") {
        return MethodKind::kUnsafe;
      }
    }
  }
  return MethodKind::kNone;
}

absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& self,
                                 std::string_view name, CallArgs& args) {
  if (self.is_string()) return CallStrMethod(in, self.str(), name, args);
  if (self.is_dict()) return CallDictMethod(in, self, name, args);
  if (self.is_list()) return CallListMethod(in, self, name, args);
  return Interpreter::TypeError(
      Cat("'", TypeName(self), "' has no method '", name, "'"));
}

}  // namespace tandem::jinja
