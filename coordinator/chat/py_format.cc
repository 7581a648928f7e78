// Python's two string formatting mini-languages: printf-style `%` and
// str.format (with the common format-spec features).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 for the type's default
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char grouping = 0;
  char type = 0;
};

std::string Pad(std::string body, const Spec& sp, char default_align) {
  const auto len = static_cast<int64_t>(CodePointCount(body));
  if (sp.width <= len) return body;
  const char align = sp.align ? sp.align : default_align;
  const int64_t marg = sp.width - len;
  if (align == '=') {
    size_t sign_len =
        (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' '))
            ? 1
            : 0;
    if (body.size() > sign_len + 1 && body[sign_len] == '0' &&
        (body[sign_len + 1] == 'x' || body[sign_len + 1] == 'X' ||
         body[sign_len + 1] == 'o' || body[sign_len + 1] == 'b')) {
      sign_len += 2;
    }
    return body.substr(0, sign_len) +
           std::string(static_cast<size_t>(marg), sp.fill) +
           body.substr(sign_len);
  }
  const int64_t left = align == '>' ? marg : align == '^' ? marg / 2 : 0;
  return std::string(static_cast<size_t>(left), sp.fill) + body +
         std::string(static_cast<size_t>(marg - left), sp.fill);
}

std::string Group(const std::string& digits, char sep) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[i]);
    if (sep && (n - i - 1) % 3 == 0 && i + 1 < n) out.push_back(sep);
  }
  return out;
}

absl::StatusOr<std::string> FormatNumber(const Value& v, Spec sp) {
  char type = sp.type;
  const bool is_int = v.is_integral();
  if (type == 0) type = is_int ? 'd' : 'r';
  std::string body;
  char buf[512];
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' ||
      type == 'c') {
    if (!is_int) {
      return Interpreter::ValueError(Cat("Unknown format code '",
                                         std::string(1, type),
                                         "' for object of type 'float'"));
    }
    const int64_t i = v.int_value();
    const uint64_t mag =
        i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    if (type == 'c') {
      AppendUtf8(static_cast<char32_t>(mag), &body);
      return Pad(body, sp, '<');
    }
    std::string digits;
    if (type == 'b') {
      uint64_t m = mag;
      do {
        digits.insert(digits.begin(), static_cast<char>('0' + (m & 1)));
        m >>= 1;
      } while (m);
    } else {
      std::snprintf(buf, sizeof(buf),
                    type == 'd'   ? "%llu"
                    : type == 'o' ? "%llo"
                    : type == 'x' ? "%llx"
                                  : "%llX",
                    static_cast<unsigned long long>(mag));
      digits = buf;
    }
    if (type == 'd') digits = Group(digits, sp.grouping);
    std::string prefix = i < 0            ? "-"
                         : sp.sign == '+' ? "+"
                         : sp.sign == ' ' ? " "
                                          : "";
    if (sp.alt && type != 'd')
      prefix += type == 'X' ? "0X" : std::string("0") + type;
    body = prefix + digits;
  } else {
    const double d = v.float_value();
    if (type == 'r') {
      body = sp.precision >= 0 ? "" : PyFloatRepr(d);
      if (sp.precision >= 0) {
        std::snprintf(buf, sizeof(buf), "%.*g",
                      static_cast<int>(std::min<int64_t>(sp.precision, 100)),
                      d);
        body = buf;
      }
      if (d >= 0 && sp.sign != '-') body = std::string(1, sp.sign) + body;
    } else {
      const bool pct = type == '%';
      const char ct = pct ? 'f' : type;
      if (std::string_view("eEfFgG").find(ct) == std::string_view::npos) {
        return Interpreter::ValueError(
            Cat("Unknown format code '", std::string(1, type), "'"));
      }
      std::string f = "%";
      if (sp.sign != '-') f += sp.sign;
      if (sp.alt) f += '#';
      f += ".*";
      f += ct;
      std::snprintf(buf, sizeof(buf), f.c_str(),
                    static_cast<int>(std::min<int64_t>(
                        sp.precision < 0 ? 6 : sp.precision, 100)),
                    pct ? d * 100 : d);
      body = buf;
      if (pct) body += '%';
      if (sp.grouping) {
        size_t start =
            (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
        size_t end = start;
        while (end < body.size() && body[end] >= '0' && body[end] <= '9') ++end;
        body = body.substr(0, start) +
               Group(body.substr(start, end - start), sp.grouping) +
               body.substr(end);
      }
    }
  }
  if (sp.zero && !sp.align) {
    sp.fill = '0';
    sp.align = '=';
  }
  return Pad(body, sp, '>');
}

absl::StatusOr<Spec> ParseSpec(std::string_view s) {
  Spec sp;
  size_t i = 0;
  auto is_align = [](char c) {
    return c == '<' || c == '>' || c == '^' || c == '=';
  };
  if (s.size() >= 2 && is_align(s[1])) {
    sp.fill = s[0];
    sp.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' '))
    sp.sign = s[i++];
  if (i < s.size() && s[i] == '#') sp.alt = true, ++i;
  if (i < s.size() && s[i] == '0') sp.zero = true, ++i;
  auto num = [&](int64_t* out) {
    int64_t v = 0;
    bool any = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && v < 100000000) {
      v = v * 10 + (s[i++] - '0');
      any = true;
    }
    if (any) *out = v;
  };
  num(&sp.width);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) sp.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    num(&sp.precision);
  }
  if (i < s.size()) sp.type = s[i++];
  if (i != s.size()) return Interpreter::ValueError("Invalid format specifier");
  if (sp.width > 10'000'000)
    return Interpreter::ValueError("format width too large");
  return sp;
}

absl::StatusOr<std::string> FormatValue(Interpreter& in, const Value& v,
                                        std::string_view spec) {
  if (spec.empty()) return in.Str(v);
  TANDEM_ASSIGN_OR_RETURN(Spec sp, ParseSpec(spec));
  if (v.is_number()) return FormatNumber(v, sp);
  if (v.is_string() && (sp.type == 0 || sp.type == 's')) {
    std::string s = v.str();
    if (sp.precision >= 0) {
      std::u32string u = DecodeUtf8(s);
      if (static_cast<int64_t>(u.size()) > sp.precision)
        u.resize(static_cast<size_t>(sp.precision));
      s = EncodeUtf8(u);
    }
    return Pad(s, sp, '<');
  }
  return Interpreter::TypeError(
      Cat("unsupported format string passed to ", TypeName(v), ".__format__"));
}

}  // namespace

absl::StatusOr<std::string> PercentFormat(Interpreter& in,
                                          const std::string& fmt,
                                          const Value& args) {
  std::vector<Value> pos;
  const bool mapping = args.is_dict();
  // Python treats any non-tuple argument with __getitem__ (list, dict) as a
  // mapping: unused arguments are then not an error.
  const bool mapping_like =
      mapping || args.is_undefined() ||
      (args.is_list() && !args.is_tuple() && !args.is_iterator());
  if (args.is_tuple()) {
    pos = args.list().items;
  } else {
    pos.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) return Interpreter::ValueError("incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    std::optional<Value> arg;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos)
        return Interpreter::ValueError("incomplete format key");
      if (!mapping) return Interpreter::TypeError("format requires a mapping");
      const Value* v =
          args.dict().Find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (v == nullptr) {
        return absl::InvalidArgumentError(
            Cat("KeyError: '", fmt.substr(i + 1, close - i - 1), "'"));
      }
      arg = *v;
      used_mapping = true;
      i = close + 1;
    }
    Spec sp;
    sp.align = '>';
    for (; i < fmt.size() &&
           std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos;
         ++i) {
      if (fmt[i] == '-') sp.align = '<';
      if (fmt[i] == '+' || fmt[i] == ' ')
        sp.sign = sp.sign == '+' ? '+' : fmt[i];
      if (fmt[i] == '#') sp.alt = true;
      if (fmt[i] == '0') sp.zero = true;
    }
    auto take = [&]() -> absl::StatusOr<Value> {
      if (next >= pos.size())
        return Interpreter::TypeError("not enough arguments for format string");
      return pos[next++];
    };
    auto number = [&](int64_t* out_num) -> absl::Status {
      if (i < fmt.size() && fmt[i] == '*') {
        ++i;
        TANDEM_ASSIGN_OR_RETURN(Value w, take());
        TANDEM_ASSIGN_OR_RETURN(*out_num, ToIndex("*", w));
        return absl::OkStatus();
      }
      int64_t v = 0;
      bool any = false;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9' &&
             v < 100000000) {
        v = v * 10 + (fmt[i++] - '0');
        any = true;
      }
      if (any) *out_num = v;
      return absl::OkStatus();
    };
    TANDEM_RETURN_IF_ERROR(number(&sp.width));
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      sp.precision = 0;
      TANDEM_RETURN_IF_ERROR(number(&sp.precision));
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L'))
      ++i;
    if (i >= fmt.size()) return Interpreter::ValueError("incomplete format");
    if (sp.width > 10'000'000)
      return Interpreter::ValueError("format width too large");
    const char type = fmt[i];
    if (!arg) {
      if (mapping) {
        arg = args;
        used_mapping = true;
      } else {
        TANDEM_ASSIGN_OR_RETURN(arg, take());
      }
    }
    const Value& v = *arg;
    std::string piece;
    if (type == 's' || type == 'r' || type == 'a') {
      if (type == 's') {
        TANDEM_ASSIGN_OR_RETURN(piece, in.Str(v));
      } else {
        TANDEM_RETURN_IF_ERROR(
            AppendRepr(v, &piece, in.limits().max_output_bytes));
      }
      if (sp.precision >= 0) {
        std::u32string u = DecodeUtf8(piece);
        if (static_cast<int64_t>(u.size()) > sp.precision)
          u.resize(static_cast<size_t>(sp.precision));
        piece = EncodeUtf8(u);
      }
      sp.zero = false;
      piece = Pad(piece, sp, '>');
    } else if (std::string_view("diuxXoeEfFgGc").find(type) !=
               std::string_view::npos) {
      if (!v.is_number()) {
        return Interpreter::TypeError(
            Cat("%", std::string(1, type),
                " format: a real number is required, not ", TypeName(v)));
      }
      Value num = v;
      char t = type == 'i' || type == 'u' ? 'd' : type;
      if ((t == 'd' || t == 'x' || t == 'X' || t == 'o' || t == 'c') &&
          v.is_float()) {
        if (t != 'd') {
          return Interpreter::TypeError(
              Cat("%", std::string(1, t),
                  " format: an integer is required, not float"));
        }
        if (!std::isfinite(v.float_value()) ||
            std::fabs(v.float_value()) > 9e18) {
          return Interpreter::ValueError("cannot convert float to integer");
        }
        num = Value::Int(static_cast<int64_t>(v.float_value()));
      }
      sp.type = t;
      if (sp.zero && sp.align != '<') {
        sp.fill = '0';
        sp.align = '=';
      }
      sp.zero = false;
      if (std::string_view("eEfFgG").find(t) != std::string_view::npos &&
          sp.precision < 0) {
        sp.precision = 6;
      }
      if ((t == 'd' || t == 'x' || t == 'X' || t == 'o') && sp.precision >= 0)
        sp.precision = -1;
      TANDEM_ASSIGN_OR_RETURN(piece, FormatNumber(num, sp));
    } else {
      return Interpreter::ValueError(
          Cat("unsupported format character '", std::string(1, type), "'"));
    }
    out += piece;
    TANDEM_RETURN_IF_ERROR(in.ChargeBytes(out.size() / 8));
  }
  if (!mapping_like && next < pos.size()) {
    return Interpreter::TypeError(
        "not all arguments converted during string formatting");
  }
  (void)used_mapping;
  return out;
}

absl::StatusOr<std::string> StrFormat(Interpreter& in, const std::string& fmt,
                                      CallArgs& args) {
  std::string out;
  int auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return Interpreter::ValueError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    // Find the matching '}' (one level of nesting inside the spec).
    size_t j = i + 1;
    int depth = 1;
    for (; j < fmt.size(); ++j) {
      if (fmt[j] == '{') ++depth;
      if (fmt[j] == '}' && --depth == 0) break;
    }
    if (j >= fmt.size())
      return Interpreter::ValueError("expected '}' before end of string");
    std::string field = fmt.substr(i + 1, j - i - 1);
    i = j;
    std::string spec;
    char conv = 0;
    const size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) {
        return Interpreter::ValueError(
            "end of string expected after conversion specifier");
      }
      conv = field[bang + 1];
      field.resize(bang);
    }
    if (spec.find('{') != std::string::npos) {
      CallArgs copy = args;
      TANDEM_ASSIGN_OR_RETURN(spec, StrFormat(in, spec, copy));
    }
    // field_name: arg_name ("." attr | "[" key "]")*
    size_t k = 0;
    while (k < field.size() && field[k] != '.' && field[k] != '[') ++k;
    const std::string head = field.substr(0, k);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char ch) {
          return ch >= '0' && ch <= '9';
        })) {
      int64_t idx;
      if (head.empty()) {
        if (manual) {
          return Interpreter::ValueError(
              "cannot switch from manual field specification to automatic "
              "field numbering");
        }
        automatic = true;
        idx = auto_index++;
      } else {
        if (automatic) {
          return Interpreter::ValueError(
              "cannot switch from automatic field numbering to manual field "
              "specification");
        }
        manual = true;
        idx = head.size() > 9 ? INT64_MAX : std::stoll(head);
      }
      if (idx >= static_cast<int64_t>(args.args.size())) {
        return absl::InvalidArgumentError(
            Cat("IndexError: Replacement index ", idx,
                " out of range for positional args tuple"));
      }
      v = args.args[static_cast<size_t>(idx)];
    } else {
      auto it = std::find_if(args.kwargs.begin(), args.kwargs.end(),
                             [&](const auto& kv) { return kv.first == head; });
      if (it == args.kwargs.end())
        return absl::InvalidArgumentError(Cat("KeyError: '", head, "'"));
      v = it->second;
    }
    while (k < field.size()) {
      if (field[k] == '.') {
        size_t e = k + 1;
        while (e < field.size() && field[e] != '.' && field[e] != '[') ++e;
        TANDEM_ASSIGN_OR_RETURN(v,
                                in.GetAttr(v, field.substr(k + 1, e - k - 1)));
        k = e;
      } else {
        const size_t e = field.find(']', k);
        if (e == std::string::npos)
          return Interpreter::ValueError("Missing ']' in format string");
        const std::string key = field.substr(k + 1, e - k - 1);
        const bool digits = !key.empty() && key.size() < 18 &&
                            std::all_of(key.begin(), key.end(), [](char ch) {
                              return ch >= '0' && ch <= '9';
                            });
        TANDEM_ASSIGN_OR_RETURN(
            v, in.GetItem(v, digits ? Value::Int(std::stoll(key))
                                    : Value::String(key)));
        k = e + 1;
      }
    }
    if (conv == 'r' || conv == 'a') {
      std::string r;
      TANDEM_RETURN_IF_ERROR(AppendRepr(v, &r, in.limits().max_output_bytes));
      v = Value::String(std::move(r));
    } else if (conv == 's') {
      TANDEM_ASSIGN_OR_RETURN(std::string s, in.Str(v));
      v = Value::String(std::move(s));
    } else if (conv != 0) {
      return Interpreter::ValueError(
          Cat("Unknown conversion specifier ", std::string(1, conv)));
    }
    TANDEM_ASSIGN_OR_RETURN(std::string piece, FormatValue(in, v, spec));
    out += piece;
    TANDEM_RETURN_IF_ERROR(in.ChargeBytes(out.size() / 8));
  }
  return out;
}

}  // namespace tandem::jinja
