#include "coordinator/chat/value.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

int64_t SatAdd(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 4;
  return (a > kMax - b) ? kMax : a + b;
}

absl::Status TooLong(size_t limit) {
  return absl::ResourceExhaustedError(
      Cat("rendered text exceeds the limit of ", limit, " bytes"));
}

// Exact int == float comparison, as Python does it.
bool IntEqualsFloat(int64_t i, double f) {
  if (!std::isfinite(f) || f != std::trunc(f)) return false;
  if (f < -9.2233720368547758e18 || f >= 9.2233720368547758e18) return false;
  return static_cast<int64_t>(f) == i;
}

int CompareNumbers(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    const int64_t x = a.int_value(), y = b.int_value();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  const double x = a.float_value(), y = b.float_value();
  return x < y ? -1 : (x > y ? 1 : 0);
}

struct Printer {
  std::string* out;
  size_t limit;
  std::vector<const NamespaceData*> visiting;

  absl::Status Check() const {
    return out->size() > limit ? TooLong(limit) : absl::OkStatus();
  }

  absl::Status Str(const Value& v) {
    switch (v.kind()) {
      case ValueKind::kUndefined:
        return absl::OkStatus();
      case ValueKind::kString:
        if (out->size() + v.str().size() > limit) return TooLong(limit);
        out->append(v.str());
        return absl::OkStatus();
      default:
        return Repr(v);
    }
  }

  absl::Status Repr(const Value& v) {
    switch (v.kind()) {
      case ValueKind::kUndefined:
        out->append("Undefined");
        break;
      case ValueKind::kNone:
        out->append("None");
        break;
      case ValueKind::kBool:
        out->append(v.bool_value() ? "True" : "False");
        break;
      case ValueKind::kInt:
        AppendCat(out, v.int_value());
        break;
      case ValueKind::kFloat:
        out->append(PyFloatRepr(v.float_value()));
        break;
      case ValueKind::kString:
        if (out->size() + v.str().size() > limit) return TooLong(limit);
        AppendPyStrRepr(v.str(), out);
        break;
      case ValueKind::kList: {
        const ListData& l = v.list();
        if (l.kind == ListKind::kIterator) {
          out->append("<generator object>");
          break;
        }
        if (l.kind == ListKind::kRange) {
          AppendCat(out, "range(", l.range_start, ", ", l.range_stop);
          if (l.range_step != 1) AppendCat(out, ", ", l.range_step);
          out->push_back(')');
          break;
        }
        const bool tuple = l.kind == ListKind::kTuple;
        out->push_back(tuple ? '(' : '[');
        for (size_t i = 0; i < l.items.size(); ++i) {
          if (i) out->append(", ");
          if (auto s = Repr(l.items[i]); !s.ok()) return s;
        }
        if (tuple && l.items.size() == 1) out->push_back(',');
        out->push_back(tuple ? ')' : ']');
        break;
      }
      case ValueKind::kDict: {
        out->push_back('{');
        bool first = true;
        for (const auto& [k, val] : v.dict().items) {
          if (!first) out->append(", ");
          first = false;
          if (auto s = Repr(k); !s.ok()) return s;
          out->append(": ");
          if (auto s = Repr(val); !s.ok()) return s;
        }
        out->push_back('}');
        break;
      }
      case ValueKind::kNamespace: {
        const NamespaceData* ns = &v.ns();
        if (std::find(visiting.begin(), visiting.end(), ns) != visiting.end()) {
          out->append("<Namespace {...}>");
          break;
        }
        visiting.push_back(ns);
        out->append("<Namespace {");
        bool first = true;
        for (const auto& [k, val] : ns->attrs) {
          if (!first) out->append(", ");
          first = false;
          AppendPyStrRepr(k, out);
          out->append(": ");
          if (auto s = Repr(val); !s.ok()) return s;
        }
        out->append("}>");
        visiting.pop_back();
        break;
      }
      case ValueKind::kCallable:
        AppendCat(out, "<function ", v.callable().name, ">");
        break;
    }
    return Check();
  }
};

struct JsonWriter {
  const JsonDumpOptions& opts;
  std::string* out;
  size_t limit;

  void Newline(int level) {
    out->push_back('\n');
    for (int i = 0; i < level; ++i) out->append(*opts.indent);
  }

  absl::Status Float(double d) {
    if (std::isnan(d)) {
      out->append("NaN");
    } else if (std::isinf(d)) {
      out->append(d < 0 ? "-Infinity" : "Infinity");
    } else {
      out->append(PyFloatRepr(d));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Key(const Value& k) {
    switch (k.kind()) {
      case ValueKind::kString:
        return k.str();
      case ValueKind::kBool:
        return std::string(k.bool_value() ? "true" : "false");
      case ValueKind::kInt:
        return Cat(k.int_value());
      case ValueKind::kFloat: {
        std::string s;
        std::swap(s, *out);
        (void)Float(k.float_value());
        std::swap(s, *out);
        return s;
      }
      case ValueKind::kNone:
        return std::string("null");
      default:
        return absl::InvalidArgumentError(
            Cat("TypeError: keys must be str, int, float, bool or None, not ",
                TypeName(k)));
    }
  }

  absl::Status Write(const Value& v, int level) {
    switch (v.kind()) {
      case ValueKind::kNone:
        out->append("null");
        break;
      case ValueKind::kBool:
        out->append(v.bool_value() ? "true" : "false");
        break;
      case ValueKind::kInt:
        AppendCat(out, v.int_value());
        break;
      case ValueKind::kFloat:
        (void)Float(v.float_value());
        break;
      case ValueKind::kString:
        if (out->size() + v.str().size() > limit) return TooLong(limit);
        AppendJsonString(v.str(), opts.ensure_ascii, out);
        break;
      case ValueKind::kList: {
        const ListData& l = v.list();
        if (l.kind == ListKind::kIterator || l.kind == ListKind::kRange) {
          return absl::InvalidArgumentError(Cat("TypeError: Object of type ",
                                                TypeName(v),
                                                " is not JSON serializable"));
        }
        if (l.items.empty()) {
          out->append("[]");
          break;
        }
        out->push_back('[');
        for (size_t i = 0; i < l.items.size(); ++i) {
          if (i) out->append(opts.item_sep);
          if (opts.indent) Newline(level + 1);
          if (auto s = Write(l.items[i], level + 1); !s.ok()) return s;
        }
        if (opts.indent) Newline(level);
        out->push_back(']');
        break;
      }
      case ValueKind::kDict: {
        const DictData& d = v.dict();
        if (d.items.empty()) {
          out->append("{}");
          break;
        }
        std::vector<const std::pair<Value, Value>*> items;
        items.reserve(d.items.size());
        for (const auto& kv : d.items) items.push_back(&kv);
        if (opts.sort_keys) {
          absl::Status err;
          std::stable_sort(items.begin(), items.end(), [&](auto* x, auto* y) {
            auto c = Compare(x->first, y->first);
            if (!c.ok()) {
              if (err.ok()) err = c.status();
              return false;
            }
            return *c < 0;
          });
          if (!err.ok()) return err;
        }
        out->push_back('{');
        bool first = true;
        for (const auto* kv : items) {
          if (!first) out->append(opts.item_sep);
          first = false;
          if (opts.indent) Newline(level + 1);
          auto key = Key(kv->first);
          if (!key.ok()) return key.status();
          AppendJsonString(*key, opts.ensure_ascii, out);
          out->append(opts.key_sep);
          if (auto s = Write(kv->second, level + 1); !s.ok()) return s;
        }
        if (opts.indent) Newline(level);
        out->push_back('}');
        break;
      }
      case ValueKind::kUndefined:
        return absl::InvalidArgumentError(
            "TypeError: Object of type Undefined is not JSON serializable");
      case ValueKind::kNamespace:
        return absl::InvalidArgumentError(
            "TypeError: Object of type TemplateNamespace is not JSON "
            "serializable");
      case ValueKind::kCallable:
        return absl::InvalidArgumentError(
            "TypeError: Object of type function is not JSON serializable");
    }
    return out->size() > limit ? TooLong(limit) : absl::OkStatus();
  }
};

}  // namespace

const Value* DictData::Find(const Value& key) const {
  for (const auto& kv : items) {
    if (Equals(kv.first, key)) return &kv.second;
  }
  return nullptr;
}

const Value* DictData::Find(std::string_view key) const {
  for (const auto& kv : items) {
    if (kv.first.is_string() && kv.first.str() == key) return &kv.second;
  }
  return nullptr;
}

Value* NamespaceData::Find(std::string_view name) {
  for (auto& kv : attrs) {
    if (kv.first == name) return &kv.second;
  }
  return nullptr;
}

std::shared_ptr<const Value::UndefinedData> Value::UndefinedPtr() {
  static const auto* const kEmpty = new std::shared_ptr<const UndefinedData>(
      std::make_shared<const UndefinedData>());
  return *kEmpty;
}

Value Value::Undefined(std::string hint) {
  return Value(Storage(
      std::in_place_index<0>,
      std::make_shared<const UndefinedData>(UndefinedData{std::move(hint)})));
}

Value Value::String(std::string s) {
  return Value(Storage(std::in_place_index<5>,
                       std::make_shared<const std::string>(std::move(s))));
}

Value Value::List(std::vector<Value> items, ListKind kind) {
  auto d = std::make_shared<ListData>();
  int32_t depth = 0;
  int64_t nodes = 1;
  for (const Value& v : items) {
    depth = std::max(depth, v.depth());
    nodes = SatAdd(nodes, v.nodes());
  }
  d->items = std::move(items);
  d->kind = kind;
  d->depth = depth + 1;
  d->nodes = nodes;
  return Value(Storage(std::in_place_index<6>,
                       std::shared_ptr<const ListData>(std::move(d))));
}

Value Value::Range(int64_t start, int64_t stop, int64_t step,
                   std::vector<Value> items) {
  Value v = List(std::move(items), ListKind::kRange);
  auto* d = const_cast<ListData*>(&v.list());  // freshly made, not shared yet
  d->range_start = start;
  d->range_stop = stop;
  d->range_step = step;
  return v;
}

Value Value::Dict(std::vector<std::pair<Value, Value>> items) {
  auto d = std::make_shared<DictData>();
  int32_t depth = 0;
  int64_t nodes = 1;
  for (const auto& [k, v] : items) {
    depth = std::max({depth, k.depth(), v.depth()});
    nodes = SatAdd(nodes, SatAdd(k.nodes(), v.nodes()));
  }
  d->items = std::move(items);
  d->depth = depth + 1;
  d->nodes = nodes;
  return Value(Storage(std::in_place_index<7>,
                       std::shared_ptr<const DictData>(std::move(d))));
}

Value Value::Namespace(std::vector<std::pair<std::string, Value>> attrs) {
  auto d = std::make_shared<NamespaceData>();
  d->attrs = std::move(attrs);
  return Value(Storage(std::in_place_index<8>, std::move(d)));
}

Value Value::Callable(std::string name, NativeFn fn) {
  return Value(Storage(std::in_place_index<9>,
                       std::make_shared<const CallableData>(
                           CallableData{std::move(name), std::move(fn)})));
}

bool Value::bool_value() const {
  const bool* b = std::get_if<2>(&data_);
  return b != nullptr && *b;
}

int64_t Value::int_value() const {
  if (const int64_t* i = std::get_if<3>(&data_)) return *i;
  return bool_value() ? 1 : 0;
}

double Value::float_value() const {
  if (const double* d = std::get_if<4>(&data_)) return *d;
  return static_cast<double>(int_value());
}

const std::string& Value::str() const {
  static const std::string* const kEmpty = new std::string();
  const auto* p = std::get_if<5>(&data_);
  return p != nullptr ? **p : *kEmpty;
}

const std::string& Value::undefined_hint() const {
  static const std::string* const kEmpty = new std::string();
  const auto* p = std::get_if<0>(&data_);
  return p != nullptr ? (*p)->hint : *kEmpty;
}

const ListData& Value::list() const {
  static const ListData* const kEmpty = new ListData();
  const auto* p = std::get_if<6>(&data_);
  return p != nullptr ? **p : *kEmpty;
}

const DictData& Value::dict() const {
  static const DictData* const kEmpty = new DictData();
  const auto* p = std::get_if<7>(&data_);
  return p != nullptr ? **p : *kEmpty;
}

NamespaceData& Value::ns() const {
  thread_local NamespaceData scratch;  // never shared between renders
  const auto* p = std::get_if<8>(&data_);
  if (p != nullptr) return **p;
  scratch.attrs.clear();
  return scratch;
}

std::shared_ptr<NamespaceData> Value::ns_ptr() const {
  const auto* p = std::get_if<8>(&data_);
  return p != nullptr ? *p : nullptr;
}

const CallableData& Value::callable() const {
  static const CallableData* const kNone = new CallableData{
      "none", [](Interpreter&, CallArgs&) -> absl::StatusOr<Value> {
        return absl::InternalError("not callable");
      }};
  const auto* p = std::get_if<9>(&data_);
  return p != nullptr ? **p : *kNone;
}

int32_t Value::depth() const {
  if (is_list()) return list().depth;
  if (is_dict()) return dict().depth;
  return is_namespace() ? 1 : 0;
}

int64_t Value::nodes() const {
  if (is_list()) return list().nodes;
  if (is_dict()) return dict().nodes;
  return 1;
}

std::string_view TypeName(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      switch (v.list().kind) {
        case ListKind::kList:
          return "list";
        case ListKind::kTuple:
          return "tuple";
        case ListKind::kIterator:
          return "generator";
        case ListKind::kRange:
          return "range";
      }
      return "list";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kNamespace:
      return "Namespace";
    case ValueKind::kCallable:
      return "function";
  }
  return "object";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return v.bool_value();
    case ValueKind::kInt:
      return v.int_value() != 0;
    case ValueKind::kFloat:
      return v.float_value() != 0.0;
    case ValueKind::kString:
      return !v.str().empty();
    case ValueKind::kList:
      return v.is_iterator() || !v.list().items.empty();
    case ValueKind::kDict:
      return !v.dict().items.empty();
    case ValueKind::kNamespace:
    case ValueKind::kCallable:
      return true;
  }
  return false;
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral())
      return a.int_value() == b.int_value();
    if (a.is_float() && b.is_float()) return a.float_value() == b.float_value();
    return a.is_float() ? IntEqualsFloat(b.int_value(), a.float_value())
                        : IntEqualsFloat(a.int_value(), b.float_value());
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.str() == b.str();
    case ValueKind::kList: {
      const ListData& x = a.list();
      const ListData& y = b.list();
      if (&x == &y) return true;
      if (x.kind != y.kind || x.kind == ListKind::kIterator) return false;
      if (x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace:
      return &a.ns() == &b.ns();
    case ValueKind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return CompareNumbers(a, b);
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_plain_seq() && b.is_plain_seq() && a.list().kind == b.list().kind) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return absl::InvalidArgumentError(
      Cat("TypeError: '<' not supported between instances of '", TypeName(a),
          "' and '", TypeName(b), "'"));
}

absl::Status AppendStr(const Value& v, std::string* out, size_t limit) {
  Printer p{out, limit, {}};
  return p.Str(v);
}

absl::Status AppendRepr(const Value& v, std::string* out, size_t limit) {
  Printer p{out, limit, {}};
  return p.Repr(v);
}

absl::StatusOr<std::string> ToStr(const Value& v, size_t limit) {
  if (v.is_string()) return v.str();
  std::string s;
  if (auto st = AppendStr(v, &s, limit); !st.ok()) return st;
  return s;
}

absl::Status AppendJson(const Value& v, const JsonDumpOptions& opts,
                        std::string* out, size_t limit) {
  JsonWriter w{opts, out, limit};
  return w.Write(v, 0);
}

}  // namespace tandem::jinja
