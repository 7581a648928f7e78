// Jinja's builtin filters on strings and numbers (jinja2 3.1 semantics), with
// transformers' tojson. The filters on sequences are in builtin_seq_filters.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

using Fn = absl::StatusOr<Value>;

absl::StatusOr<std::string> StrArg(Interpreter& in, const BoundArgs& b,
                                   size_t i, std::string def) {
  if (!b.has(i)) return def;
  return in.Str(b.get(i));
}

absl::StatusOr<Value> StringFilter(Interpreter& in, const Value& v, CallArgs& a,
                                   std::string_view name,
                                   std::string (*fn)(std::string_view)) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind(name, a, {}));
  (void)b;
  TANDEM_ASSIGN_OR_RETURN(std::string s, in.Str(v));
  return Value::String(fn(s));
}

Fn FUpper(Interpreter& in, const Value& v, CallArgs& a) {
  return StringFilter(in, v, a, "upper", PyUpper);
}
Fn FLower(Interpreter& in, const Value& v, CallArgs& a) {
  return StringFilter(in, v, a, "lower", PyLower);
}
Fn FTitle(Interpreter& in, const Value& v, CallArgs& a) {
  return StringFilter(in, v, a, "title", JinjaTitle);
}
Fn FCapitalize(Interpreter& in, const Value& v, CallArgs& a) {
  return StringFilter(in, v, a, "capitalize", PyCapitalize);
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}
Fn FEscape(Interpreter& in, const Value& v, CallArgs& a) {
  return StringFilter(in, v, a, "escape", HtmlEscape);
}
Fn FString(Interpreter& in, const Value& v, CallArgs& a) {
  return StringFilter(in, v, a, "string",
                      [](std::string_view s) { return std::string(s); });
}

std::string StripTags(std::string_view s) {
  std::string t;
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, 4) == "<!--") {
      const size_t e = s.find("-->", i + 4);
      if (e == std::string_view::npos) {
        t.append(s.substr(i));
        break;
      }
      i = e + 3;
    } else if (s[i] == '<') {
      const size_t e = s.find('>', i + 1);
      if (e == std::string_view::npos || e == i + 1) {
        t.push_back(s[i++]);
        continue;
      }
      i = e + 1;
    } else {
      t.push_back(s[i++]);
    }
  }
  std::vector<std::string> words = PySplit(t, std::nullopt, -1);
  std::string joined;
  for (size_t i = 0; i < words.size(); ++i) joined += (i ? " " : "") + words[i];
  for (auto [from, to] : {std::pair<const char*, const char*>{"&lt;", "<"},
                          {"&gt;", ">"},
                          {"&quot;", "\""},
                          {"&#34;", "\""},
                          {"&#39;", "'"},
                          {"&amp;", "&"}}) {
    joined = PyReplace(joined, from, to, -1);
  }
  return joined;
}
Fn FStriptags(Interpreter& in, const Value& v, CallArgs& a) {
  return StringFilter(in, v, a, "striptags", StripTags);
}
Fn FSafe(Interpreter& in, const Value& v, CallArgs& a) {
  return FString(in, v, a);
}

Fn FWordcount(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("wordcount", a, {}));
  (void)b;
  TANDEM_ASSIGN_OR_RETURN(std::string s, in.Str(v));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(s)) {
    const bool w = IsPyWordChar(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::Int(n);
}

Fn FTrim(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("trim", a, {"chars"}));
  TANDEM_ASSIGN_OR_RETURN(std::string s, in.Str(v));
  std::optional<std::string> chars;
  if (b.has(0) && !b.get(0).is_none()) {
    if (!b.get(0).is_string())
      return Interpreter::TypeError("strip arg must be None or str");
    chars = b.get(0).str();
  }
  return Value::String(PyStrip(s, chars, true, true));
}

Fn FReplace(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b, BoundArgs::Bind("replace", a, {"old", "new", "count"}, 2));
  TANDEM_ASSIGN_OR_RETURN(std::string s, in.Str(v));
  TANDEM_ASSIGN_OR_RETURN(std::string o, in.Str(b.get(0)));
  TANDEM_ASSIGN_OR_RETURN(std::string n, in.Str(b.get(1)));
  int64_t count = -1;
  if (b.has(2) && !b.get(2).is_none()) {
    TANDEM_ASSIGN_OR_RETURN(count, ToIndex("replace", b.get(2)));
  }
  if (!o.empty() && n.size() > o.size() &&
      (s.size() / o.size()) * (n.size() - o.size()) >
          in.limits().max_output_bytes) {
    return in.ChargeBytes(in.limits().max_output_bytes + 1);
  }
  if (o.empty() &&
      (CodePointCount(s) + 1) * n.size() > in.limits().max_output_bytes) {
    return in.ChargeBytes(in.limits().max_output_bytes + 1);
  }
  std::string r = PyReplace(s, o, n, count);
  TANDEM_RETURN_IF_ERROR(in.ChargeBytes(r.size()));
  return Value::String(std::move(r));
}

Fn FCenter(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("center", a, {"width"}));
  TANDEM_ASSIGN_OR_RETURN(std::string s, in.Str(v));
  int64_t width = 80;
  if (b.has(0)) {
    TANDEM_ASSIGN_OR_RETURN(width, ToIndex("center", b.get(0)));
  }
  if (width > 0)
    TANDEM_RETURN_IF_ERROR(in.ChargeBytes(static_cast<size_t>(width)));
  return Value::String(PyPad(s, width, '^', ' '));
}

Fn FIndent(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b, BoundArgs::Bind("indent", a, {"width", "first", "blank"}));
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  if (!v.is_string()) {  // jinja2 does `s += "\n"` first
    return Interpreter::TypeError(Cat("unsupported operand type(s) for +=: '",
                                      TypeName(v), "' and 'str'"));
  }
  const std::string& s = v.str();
  std::string ind = "    ";
  if (b.has(0)) {
    if (b.get(0).is_string()) {
      ind = b.get(0).str();
    } else {
      TANDEM_ASSIGN_OR_RETURN(int64_t w, ToIndex("indent", b.get(0)));
      if (w > 100000) return Interpreter::ValueError("indent width too large");
      ind = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
    }
  }
  const bool first = b.has(1) && Truthy(b.get(1));
  const bool blank = b.has(2) && Truthy(b.get(2));
  std::vector<std::string> lines = PySplitLines(s + "\n", false);
  TANDEM_RETURN_IF_ERROR(in.ChargeBytes(s.size() + lines.size() * ind.size()));
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      rv += "\n";
      if (blank || !lines[i].empty()) rv += ind;
    }
    rv += lines[i];
  }
  if (first) rv = ind + rv;
  return Value::String(std::move(rv));
}

Fn FTruncate(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b,
      BoundArgs::Bind("truncate", a, {"length", "killwords", "end", "leeway"}));
  int64_t length = 255, leeway = 5;
  if (b.has(0)) {
    TANDEM_ASSIGN_OR_RETURN(length, ToIndex("truncate", b.get(0)));
  }
  if (b.has(3) && !b.get(3).is_none()) {
    TANDEM_ASSIGN_OR_RETURN(leeway, ToIndex("truncate", b.get(3)));
  }
  TANDEM_ASSIGN_OR_RETURN(std::string end, StrArg(in, b, 2, "..."));
  const auto end_len = static_cast<int64_t>(CodePointCount(end));
  if (length < end_len)
    return absl::InvalidArgumentError(
        "AssertionError: expected length >= len(end)");
  if (leeway < 0)
    return absl::InvalidArgumentError("AssertionError: expected leeway >= 0");
  TANDEM_ASSIGN_OR_RETURN(int64_t len, Length(v));
  if (len <= length + leeway) return v;  // returned as is, whatever its type
  if (!v.is_string()) {
    return Interpreter::TypeError(Cat("cannot truncate a '", TypeName(v), "'"));
  }
  const std::string& s = v.str();
  const std::u32string u = DecodeUtf8(s);
  std::string head =
      EncodeUtf8(u.substr(0, static_cast<size_t>(length - end_len)));
  if (b.has(1) && Truthy(b.get(1))) return Value::String(head + end);
  return Value::String(PyRSplit(head, std::string(" "), 1)[0] + end);
}

Fn FFormat(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) {
    return absl::InvalidArgumentError(
        "FilterArgumentError: can't handle positional and keyword arguments at "
        "the same time");
  }
  TANDEM_ASSIGN_OR_RETURN(std::string fmt, in.Str(v));
  Value args;
  if (!a.kwargs.empty()) {
    std::vector<std::pair<Value, Value>> kw;
    for (auto& [k, x] : a.kwargs) kw.emplace_back(Value::String(k), x);
    args = Value::Dict(std::move(kw));
  } else {
    args = Value::List(a.args, ListKind::kTuple);
  }
  TANDEM_ASSIGN_OR_RETURN(std::string r, PercentFormat(in, fmt, args));
  return Value::String(std::move(r));
}

Fn FLength(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("length", a, {}));
  (void)b;
  TANDEM_ASSIGN_OR_RETURN(int64_t n, Length(v));
  return Value::Int(n);
}

Fn FDefault(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b, BoundArgs::Bind("default", a, {"default_value", "boolean"}));
  const bool boolean = b.has(1) && Truthy(b.get(1));
  if (v.is_undefined() || (boolean && !Truthy(v)))
    return b.get_or(0, Value::String(""));
  return v;
}

Fn FAbs(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("abs", a, {}));
  (void)b;
  if (v.is_float()) return Value::Float(std::fabs(v.float_value()));
  if (v.is_integral()) {
    if (v.int_value() == INT64_MIN)
      return absl::InvalidArgumentError("OverflowError: integer overflow");
    return Value::Int(std::llabs(v.int_value()));
  }
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  return Interpreter::TypeError(
      Cat("bad operand type for abs(): '", TypeName(v), "'"));
}

// Python's float(str): optional whitespace, sign, digits with single
// underscores, inf/nan.
std::optional<double> ParsePyFloat(const std::string& s) {
  const std::string t = PyStrip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (i == 0 || i + 1 >= t.size() ||
          !std::isdigit(static_cast<unsigned char>(t[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(t[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    clean.push_back(t[i]);
  }
  if (clean.empty()) return std::nullopt;
  for (char c : clean) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' ||
          c == '-'))
      return std::nullopt;
  }
  std::string lower = PyLower(clean);
  std::string_view body = lower;
  if (!body.empty() && (body[0] == '+' || body[0] == '-'))
    body.remove_prefix(1);
  if (body == "inf" || body == "infinity" || body == "nan") {
    return std::strtod(lower.c_str(), nullptr);
  }
  for (char c : body) {
    if (std::isalpha(static_cast<unsigned char>(c)) && c != 'e')
      return std::nullopt;
  }
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> ParsePyInt(const std::string& s, int64_t base) {
  std::string t = PyStrip(s, std::nullopt, true, true);
  bool neg = false;
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (i + 1 < t.size() && t[i] == '0') {
      const char p = static_cast<char>(t[i + 1] | 0x20);
      const int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (pb != 0 && (base == 0 || base == pb)) {
        base = pb;
        i += 2;
        if (i < t.size() && t[i] == '_') ++i;
      }
    }
    if (base == 0) base = 10;
  }
  if (base < 2 || base > 36 || i >= t.size()) return std::nullopt;
  unsigned __int128 v = 0;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_' && prev_digit && i + 1 < t.size()) {
      prev_digit = false;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c))
                ? (c | 0x20) - 'a' + 10
                : 99;
    if (d >= base) return std::nullopt;
    v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (v > static_cast<unsigned __int128>(INT64_MAX) + 1) return std::nullopt;
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  if (!neg && v > static_cast<unsigned __int128>(INT64_MAX))
    return std::nullopt;
  return neg ? static_cast<int64_t>(0 - static_cast<uint64_t>(v))
             : static_cast<int64_t>(v);
}

Fn FInt(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("int", a, {"default", "base"}));
  const Value def = b.get_or(0, Value::Int(0));
  int64_t base = 10;
  if (b.has(1)) {
    TANDEM_ASSIGN_OR_RETURN(base, ToIndex("int", b.get(1)));
  }
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  if (v.is_integral()) return Value::Int(v.int_value());
  auto from_float = [&](double d) -> Value {
    if (!std::isfinite(d) || std::fabs(d) >= 9.2233720368547758e18) return def;
    return Value::Int(static_cast<int64_t>(d));
  };
  if (v.is_float()) return from_float(v.float_value());
  if (v.is_string()) {
    if (auto i = ParsePyInt(v.str(), base)) return Value::Int(*i);
    if (auto d = ParsePyFloat(v.str())) return from_float(*d);
  }
  return def;
}

Fn FFloat(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("float", a, {"default"}));
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  if (v.is_number()) return Value::Float(v.float_value());
  if (v.is_string()) {
    if (auto d = ParsePyFloat(v.str())) return Value::Float(*d);
  }
  return b.get_or(0, Value::Float(0.0));
}

Fn FRound(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("round", a, {"precision", "method"}));
  int64_t precision = 0;
  if (b.has(0)) {
    TANDEM_ASSIGN_OR_RETURN(precision, ToIndex("round", b.get(0)));
  }
  std::string method = "common";
  if (b.has(1)) method = b.get(1).is_string() ? b.get(1).str() : "";
  if (method != "common" && method != "ceil" && method != "floor") {
    return absl::InvalidArgumentError(
        "FilterArgumentError: method must be common, ceil or floor");
  }
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  if (!v.is_number()) {
    return Interpreter::TypeError(
        Cat("type ", TypeName(v), " doesn't define __round__ method"));
  }
  precision = std::clamp<int64_t>(precision, -400, 400);
  const double x = v.float_value();
  if (method != "common") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double r =
        method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    return Value::Float(r / scale);
  }
  if (v.is_integral()) {
    if (precision >= 0) return Value::Int(v.int_value());
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::Int(static_cast<int64_t>(std::nearbyint(x / scale) * scale));
  }
  if (!std::isfinite(x)) return Value::Float(x);
  if (precision >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f",
                  static_cast<int>(std::min<int64_t>(precision, 300)), x);
    return Value::Float(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return Value::Float(std::nearbyint(x / scale) * scale);
}

Fn FToJson(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b,
      BoundArgs::Bind("tojson", a,
                      {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions opts;
  opts.ensure_ascii = b.has(0) && Truthy(b.get(0));
  opts.sort_keys = b.has(3) && Truthy(b.get(3));
  std::string indent;
  if (b.has(1) && !b.get(1).is_none()) {
    const Value& iv = b.get(1);
    if (iv.is_string()) {
      indent = iv.str();
    } else if (iv.is_integral()) {
      if (iv.int_value() > 1000)
        return Interpreter::ValueError("indent too large");
      indent = std::string(
          static_cast<size_t>(std::max<int64_t>(iv.int_value(), 0)), ' ');
    } else {
      return Interpreter::TypeError("indent must be an int or a str");
    }
    opts.indent = &indent;
    opts.item_sep = ",";
  }
  if (b.has(2) && !b.get(2).is_none()) {
    const Value& sv = b.get(2);
    if (!sv.is_list() || sv.list().items.size() != 2 ||
        !sv.list().items[0].is_string() || !sv.list().items[1].is_string()) {
      return Interpreter::TypeError(
          "separators must be a (item_separator, key_separator) pair");
    }
    opts.item_sep = sv.list().items[0].str();
    opts.key_sep = sv.list().items[1].str();
  }
  std::string out;
  TANDEM_RETURN_IF_ERROR(
      AppendJson(v, opts, &out, in.limits().max_output_bytes));
  TANDEM_RETURN_IF_ERROR(in.ChargeBytes(out.size()));
  return Value::String(std::move(out));
}

Fn FAttr(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("attr", a, {"name"}, 1));
  TANDEM_ASSIGN_OR_RETURN(std::string name, in.Str(b.get(0)));
  if (v.is_undefined()) return Interpreter::UndefinedError(v);
  if (v.is_dict() && FindMethod(v, name) == MethodKind::kNone) {
    return Value::Undefined(Cat("'dict object' has no attribute '", name, "'"));
  }
  return in.GetAttr(v, name);
}

}  // namespace

FilterFn FindFilter(std::string_view name) {
  static const auto* const kFilters =
      new absl::flat_hash_map<std::string_view, FilterFn>{
          {"abs", FAbs},
          {"attr", FAttr},
          {"capitalize", FCapitalize},
          {"center", FCenter},
          {"count", FLength},
          {"d", FDefault},
          {"default", FDefault},
          {"e", FEscape},
          {"escape", FEscape},
          {"forceescape", FEscape},
          {"float", FFloat},
          {"format", FFormat},
          {"indent", FIndent},
          {"int", FInt},
          {"length", FLength},
          {"lower", FLower},
          {"replace", FReplace},
          {"round", FRound},
          {"safe", FSafe},
          {"string", FString},
          {"striptags", FStriptags},
          {"title", FTitle},
          {"tojson", FToJson},
          {"trim", FTrim},
          {"truncate", FTruncate},
          {"upper", FUpper},
          {"wordcount", FWordcount},
      };
  auto it = kFilters->find(name);
  return it == kFilters->end() ? internal::FindSequenceFilter(name)
                               : it->second;
}

}  // namespace tandem::jinja
