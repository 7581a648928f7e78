// Evaluates a parsed template against a context, with the semantics of jinja2
// 3.1's ImmutableSandboxedEnvironment as transformers configures it (default
// Undefined, loopcontrols, the `generation` tag, its tojson/raise_exception/
// strftime_now/namespace/dict globals).
//
// Every error is a Status; nothing throws. Work is bounded: a step budget,
// output and string sizes, container size and depth, macro call depth, and the
// machine stack actually used by the evaluation.
#ifndef TANDEM_COORDINATOR_CHAT_INTERPRETER_H_
#define TANDEM_COORDINATOR_CHAT_INTERPRETER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/chat/ast.h"
#include "coordinator/chat/value.h"

namespace tandem::jinja {

struct RenderLimits {
  size_t max_output_bytes = 32u << 20;  // rendered text, and any one string
  int64_t max_steps = 20'000'000;       // expression/statement evaluations
  int max_call_depth = 100;             // nested macro calls
  size_t max_stack_bytes = 1u << 20;    // machine stack used by evaluation
  int64_t max_container_nodes = 1'000'000;
  int max_container_depth = 200;
  // Bytes of strings built during one render, in total. Bounds memory: every
  // string the template creates is counted once, whether or not it is kept.
  size_t max_total_string_bytes = 256u << 20;
};

// Variables of the template's outermost scope.
using Globals = absl::flat_hash_map<std::string, Value>;

class Interpreter {
 public:
  Interpreter(const Template& tmpl, const RenderLimits& limits);
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  absl::StatusOr<std::string> Render(Globals globals);

  // ---- services for the builtin filters, tests, methods and globals ----
  const RenderLimits& limits() const { return limits_; }
  // Counts `n` units of work against the step budget.
  absl::Status Charge(int64_t n);
  // Charges for producing `bytes` bytes of text and checks the string size
  // limit.
  absl::Status ChargeBytes(size_t bytes);
  // Charges for reading `bytes` bytes of text.
  absl::Status ChargeScan(size_t bytes) {
    return Charge(static_cast<int64_t>(bytes / 16));
  }
  // Enforces the container size/depth limits on a freshly built value.
  absl::Status CheckValue(const Value& v) const;

  absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  absl::StatusOr<Value> Call(const Value& fn, CallArgs args);
  absl::StatusOr<Value> CallFilter(std::string_view name, const Value& v,
                                   CallArgs args);
  absl::StatusOr<bool> CallTest(std::string_view name, const Value& v,
                                CallArgs args);
  // The items a for loop over `v` visits (keys of a dict, characters of a str).
  absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
  // str(v), bounded by the output limit.
  absl::StatusOr<std::string> Str(const Value& v);
  // Python's `a in b`.
  absl::StatusOr<bool> Contains(const Value& container, const Value& item);
  // Registers a namespace created during the render (see Render()).
  void TrackNamespace(const Value& ns);

  // Errors. Messages start with the Python exception name, as jinja2 reports.
  static absl::Status TypeError(std::string_view msg);
  static absl::Status ValueError(std::string_view msg);
  static absl::Status UndefinedError(const Value& undefined);

 private:
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    std::shared_ptr<Frame> parent;
    bool captured = false;  // a macro closes over it: do not reuse
    Value* Find(std::string_view name);
  };
  enum class Pending : uint8_t { kNone, kBreak, kContinue };

  // Statements.
  absl::Status ExecBody(const Body& body);
  absl::Status Exec(const Stmt& s);
  absl::Status ExecFor(const Stmt& s);
  absl::Status ExecCallBlock(const Stmt& s);
  absl::Status Write(std::string_view text);
  absl::StatusOr<std::string> Capture(const Body& body, bool new_frame);
  absl::Status Assign(const Expr& target, const Value& v);
  void SetVar(std::string_view name, Value v);
  absl::StatusOr<Value> ApplyFilterChain(const Expr& chain, Value input);
  Value MakeMacro(const Stmt& s, std::string name);
  absl::StatusOr<Value> InvokeMacro(const Stmt& s, const std::string& name,
                                    const std::weak_ptr<Frame>& closure,
                                    CallArgs& args);

  // Expressions.
  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalInner(const Expr& e);
  absl::StatusOr<CallArgs> EvalArgs(const CallArgsExpr& call);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCompare(const Expr& e);
  absl::StatusOr<Value> EvalSlice(const Value& obj, const Expr& slice);
  absl::StatusOr<Value> Arith(Op op, const Value& a, const Value& b);
  absl::StatusOr<bool> CompareOp(Op op, const Value& a, const Value& b);
  Value Lookup(std::string_view name);

  absl::Status CheckStack() const;
  absl::Status At(absl::Status s, uint32_t offset) const;

  const Template& tmpl_;
  RenderLimits limits_;
  Globals globals_;
  std::shared_ptr<Frame> root_;
  std::shared_ptr<Frame> frame_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  size_t string_bytes_ = 0;
  int call_depth_ = 0;
  uintptr_t stack_base_ = 0;
  Pending pending_ = Pending::kNone;
  std::vector<std::weak_ptr<NamespaceData>> namespaces_;
};

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_INTERPRETER_H_
