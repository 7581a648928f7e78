// Jinja's builtin filters and tests, the methods of str/dict/list values, and
// the globals transformers provides, plus the argument binding they share.
#ifndef TANDEM_COORDINATOR_CHAT_BUILTINS_H_
#define TANDEM_COORDINATOR_CHAT_BUILTINS_H_

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/chat/interpreter.h"
#include "coordinator/chat/value.h"

namespace tandem::jinja {

using FilterFn = absl::StatusOr<Value> (*)(Interpreter&, const Value&,
                                           CallArgs&);
using TestFn = absl::StatusOr<bool> (*)(Interpreter&, const Value&, CallArgs&);

// nullptr when there is no such filter / test.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);
namespace internal {
FilterFn FindSequenceFilter(std::string_view name);  // builtin_seq_filters.cc
}  // namespace internal

// Methods. kSafe: callable; kUnsafe: exists but mutates (the sandbox refuses
// it).
enum class MethodKind { kNone, kSafe, kUnsafe };
MethodKind FindMethod(const Value& self, std::string_view name);
absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& self,
                                 std::string_view name, CallArgs& args);

// range, namespace, dict, raise_exception, strftime_now; nullopt otherwise.
std::optional<Value> FindGlobal(std::string_view name);

// Python's `format % args` (printf-style), and str.format.
absl::StatusOr<std::string> PercentFormat(Interpreter& in,
                                          const std::string& fmt,
                                          const Value& args);
absl::StatusOr<std::string> StrFormat(Interpreter& in, const std::string& fmt,
                                      CallArgs& args);

// Binds call arguments to a builtin's parameters, like a Python signature
// `fn(p0, p1=..., ...)`. Unknown keywords and excess positionals are
// TypeErrors.
class BoundArgs {
 public:
  static absl::StatusOr<BoundArgs> Bind(
      std::string_view fn, const CallArgs& call,
      std::initializer_list<std::string_view> params, size_t required = 0);
  bool has(size_t i) const { return i < vals_.size() && vals_[i].has_value(); }
  const Value& get(size_t i) const { return *vals_[i]; }
  Value get_or(size_t i, Value def) const {
    return has(i) ? *vals_[i] : std::move(def);
  }

 private:
  std::vector<std::optional<Value>> vals_;
};

// Helpers shared by the builtin files.
absl::StatusOr<int64_t> ToIndex(std::string_view what, const Value& v);
// Looks up a dotted attribute path ("a.b.0") like jinja's make_attrgetter.
absl::StatusOr<Value> GetAttrPath(Interpreter& in, const Value& item,
                                  const Value& attribute);
// Python's len(); TypeError for values without one.
absl::StatusOr<int64_t> Length(const Value& v);

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_BUILTINS_H_
