// Values of the Jinja interpreter, modelled on the Python objects that Jinja
// templates see when transformers renders a chat template: str, int (64-bit
// here), float, bool, None, list, tuple, dict (insertion-ordered), Jinja's
// Undefined, namespace objects and callables.
//
// Lists, tuples and dicts are immutable and shared (copying a Value is cheap):
// transformers renders in ImmutableSandboxedEnvironment, where templates cannot
// mutate them. Namespaces are the only mutable objects. Every container records
// its nesting depth and its size as a tree (shared children counted each time
// they appear), so the interpreter can bound both before anything recurses.
#ifndef TANDEM_COORDINATOR_CHAT_VALUE_H_
#define TANDEM_COORDINATOR_CHAT_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::jinja {

class Value;
class Interpreter;

enum class ValueKind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kCallable,
};

// A list-like value is a Python list, a tuple, a range (materialized, but
// printed and typed as a range), or a one-shot iterator such as the
// generators that map/select/... return (always truthy, no len()).
enum class ListKind : uint8_t { kList, kTuple, kIterator, kRange };

struct ListData {
  std::vector<Value> items;
  ListKind kind = ListKind::kList;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // kRange only
  int32_t depth = 1;
  int64_t nodes = 1;
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order
  int32_t depth = 1;
  int64_t nodes = 1;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  Value* Find(std::string_view name);
};

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFn = std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)>;

struct CallableData {
  std::string name;  // for messages and repr
  NativeFn fn;
};

class Value {
 public:
  Value() : data_(UndefinedPtr()) {}  // Undefined without a hint

  static Value Undefined(std::string hint);
  static Value None() { return Value(Storage(std::in_place_index<1>)); }
  static Value Bool(bool b) {
    return Value(Storage(std::in_place_index<2>, b));
  }
  static Value Int(int64_t i) {
    return Value(Storage(std::in_place_index<3>, i));
  }
  static Value Float(double d) {
    return Value(Storage(std::in_place_index<4>, d));
  }
  static Value String(std::string s);
  static Value List(std::vector<Value> items, ListKind kind = ListKind::kList);
  static Value Range(int64_t start, int64_t stop, int64_t step,
                     std::vector<Value> items);
  static Value Dict(std::vector<std::pair<Value, Value>> items);
  static Value Namespace(std::vector<std::pair<std::string, Value>> attrs);
  static Value Callable(std::string name, NativeFn fn);

  ValueKind kind() const { return static_cast<ValueKind>(data_.index()); }
  bool is_undefined() const { return kind() == ValueKind::kUndefined; }
  bool is_none() const { return kind() == ValueKind::kNone; }
  bool is_bool() const { return kind() == ValueKind::kBool; }
  bool is_int() const { return kind() == ValueKind::kInt; }
  bool is_float() const { return kind() == ValueKind::kFloat; }
  bool is_string() const { return kind() == ValueKind::kString; }
  bool is_list() const { return kind() == ValueKind::kList; }
  bool is_dict() const { return kind() == ValueKind::kDict; }
  bool is_namespace() const { return kind() == ValueKind::kNamespace; }
  bool is_callable() const { return kind() == ValueKind::kCallable; }
  // int or bool (Python's bool is an int).
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_number() const { return is_int() || is_bool() || is_float(); }
  bool is_tuple() const { return is_list() && list().kind == ListKind::kTuple; }
  bool is_iterator() const {
    return is_list() && list().kind == ListKind::kIterator;
  }
  bool is_range() const { return is_list() && list().kind == ListKind::kRange; }
  // A Python list or tuple (what + and * accept).
  bool is_plain_seq() const {
    return is_list() &&
           (list().kind == ListKind::kList || list().kind == ListKind::kTuple);
  }

  // Accessors. Callers check the kind first; on a kind mismatch (a bug) they
  // return an empty value of the asked type instead of throwing.
  bool bool_value() const;
  int64_t int_value() const;   // int or bool
  double float_value() const;  // any number
  const std::string& str() const;
  const std::string& undefined_hint() const;
  const ListData& list() const;
  const DictData& dict() const;
  NamespaceData& ns() const;
  std::shared_ptr<NamespaceData> ns_ptr() const;
  const CallableData& callable() const;

  // Depth and tree size: 0 and 1 for scalars.
  int32_t depth() const;
  int64_t nodes() const;

 private:
  struct UndefinedData {
    std::string hint;
  };
  using Storage = std::variant<
      std::shared_ptr<const UndefinedData>, std::monostate, bool, int64_t,
      double, std::shared_ptr<const std::string>,
      std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
      std::shared_ptr<NamespaceData>, std::shared_ptr<const CallableData>>;
  explicit Value(Storage s) : data_(std::move(s)) {}
  static std::shared_ptr<const UndefinedData> UndefinedPtr();

  Storage data_;
};

// Python's type name ("str", "int", "NoneType", "list", ...).
std::string_view TypeName(const Value& v);

// Python truthiness (Undefined is false; iterators are always true).
bool Truthy(const Value& v);

// Python ==. Numbers compare by value across int/float/bool; list != tuple;
// dicts compare as mappings; namespaces and callables by identity; Undefined
// equals only Undefined.
bool Equals(const Value& a, const Value& b);

// Python ordering (<): numbers, strings, and lists/tuples of the same kind
// lexicographically. Returns -1/0/1, or TypeError for other pairs.
absl::StatusOr<int> Compare(const Value& a, const Value& b);

// str(v) and repr(v), appended to *out. They stop with ResourceExhausted once
// *out would exceed `limit` bytes.
absl::Status AppendStr(const Value& v, std::string* out, size_t limit);
absl::Status AppendRepr(const Value& v, std::string* out, size_t limit);
// str(v) for values whose text cannot exceed the limit meaningfully (scalars);
// containers are rendered with a generous internal limit.
absl::StatusOr<std::string> ToStr(const Value& v, size_t limit);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys), as transformers'
// tojson filter calls it. indent: nullptr for none, else the indent string.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  const std::string* indent = nullptr;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
absl::Status AppendJson(const Value& v, const JsonDumpOptions& opts,
                        std::string* out, size_t limit);

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_VALUE_H_
