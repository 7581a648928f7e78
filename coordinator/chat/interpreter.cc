// Statements, scopes, macros and the render loop. Expressions are in eval.cc.
#include "coordinator/chat/interpreter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/lexer.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

constexpr std::string_view kPosMarker = " (at template line ";

}  // namespace

Value* Interpreter::Frame::Find(std::string_view name) {
  for (auto& kv : vars) {
    if (kv.first == name) return &kv.second;
  }
  return nullptr;
}

Interpreter::Interpreter(const Template& tmpl, const RenderLimits& limits)
    : tmpl_(tmpl), limits_(limits) {}

absl::Status Interpreter::TypeError(std::string_view msg) {
  return absl::InvalidArgumentError(Cat("TypeError: ", msg));
}

absl::Status Interpreter::ValueError(std::string_view msg) {
  return absl::InvalidArgumentError(Cat("ValueError: ", msg));
}

absl::Status Interpreter::UndefinedError(const Value& undefined) {
  const std::string& hint =
      undefined.is_undefined() ? undefined.undefined_hint() : std::string();
  if (absl::StartsWith(hint, "access to attribute")) {
    return absl::InvalidArgumentError(Cat("SecurityError: ", hint));
  }
  return absl::InvalidArgumentError(
      Cat("UndefinedError: ", hint.empty() ? "value is undefined" : hint));
}

absl::Status Interpreter::At(absl::Status s, uint32_t offset) const {
  if (s.ok() ||
      s.message().find(absl::string_view(
          kPosMarker.data(), kPosMarker.size())) != absl::string_view::npos)
    return s;
  const SourcePos p = PosOf(tmpl_.source, offset);
  return absl::Status(s.code(), Cat(s.message(), kPosMarker, p.line,
                                    ", column ", p.column, ")"));
}

absl::Status Interpreter::Charge(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return absl::InvalidArgumentError(
        Cat("template evaluation exceeded the limit of ", limits_.max_steps,
            " steps"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ChargeBytes(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    return absl::InvalidArgumentError(Cat("string of ", bytes,
                                          " bytes exceeds the limit of ",
                                          limits_.max_output_bytes, " bytes"));
  }
  string_bytes_ += bytes;
  if (string_bytes_ > limits_.max_total_string_bytes) {
    return absl::InvalidArgumentError(
        Cat("template built more than the limit of ",
            limits_.max_total_string_bytes, " bytes of strings"));
  }
  return Charge(static_cast<int64_t>(bytes / 16));
}

absl::Status Interpreter::CheckValue(const Value& v) const {
  if (v.depth() > limits_.max_container_depth) {
    return absl::InvalidArgumentError(
        Cat("value nested deeper than the limit of ",
            limits_.max_container_depth, " levels"));
  }
  if (v.nodes() > limits_.max_container_nodes) {
    return absl::InvalidArgumentError(Cat("value has more than the limit of ",
                                          limits_.max_container_nodes,
                                          " elements"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::CheckStack() const {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (stack_base_ > here && stack_base_ - here > limits_.max_stack_bytes) {
    return absl::InvalidArgumentError(
        "template recursion is too deep (stack limit reached)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Render(Globals globals) {
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  globals_ = std::move(globals);
  root_ = std::make_shared<Frame>();
  frame_ = root_;
  std::string out;
  out_ = &out;
  absl::Status st = ExecBody(tmpl_.body);
  // Namespaces are the only mutable values, hence the only way to build a
  // reference cycle (`{% set ns.me = ns %}`); empty them to free everything.
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->attrs.clear();
  }
  namespaces_.clear();
  frame_.reset();
  root_.reset();
  globals_.clear();
  out_ = nullptr;
  if (!st.ok()) return st;
  return out;
}

void Interpreter::TrackNamespace(const Value& ns) {
  if (auto p = ns.ns_ptr()) namespaces_.push_back(p);
}

absl::Status Interpreter::Write(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return absl::InvalidArgumentError(Cat("rendered text exceeds the limit of ",
                                          limits_.max_output_bytes, " bytes"));
  }
  TANDEM_RETURN_IF_ERROR(Charge(static_cast<int64_t>(text.size() / 64)));
  out_->append(text);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body,
                                                 bool new_frame) {
  std::string buf;
  std::string* saved_out = out_;
  std::shared_ptr<Frame> saved_frame = frame_;
  out_ = &buf;
  if (new_frame) {
    auto f = std::make_shared<Frame>();
    f->parent = frame_;
    frame_ = std::move(f);
  }
  absl::Status st = ExecBody(body);
  out_ = saved_out;
  frame_ = std::move(saved_frame);
  if (!st.ok()) return st;
  return buf;
}

void Interpreter::SetVar(std::string_view name, Value v) {
  if (Value* slot = frame_->Find(name)) {
    *slot = std::move(v);
  } else {
    frame_->vars.emplace_back(std::string(name), std::move(v));
  }
}

absl::Status Interpreter::Assign(const Expr& target, const Value& v) {
  switch (target.kind) {
    case ExprKind::kName:
      SetVar(target.name, v);
      return absl::OkStatus();
    case ExprKind::kNsRef: {
      const Value ns = Lookup(target.name);
      if (!ns.is_namespace()) {
        return At(
            absl::InvalidArgumentError("TemplateRuntimeError: cannot assign "
                                       "attribute on non-namespace object"),
            target.offset);
      }
      if (absl::StartsWith(target.attr, "_")) {
        return At(absl::InvalidArgumentError(
                      Cat("SecurityError: Chat templates cannot store "
                          "underscore-prefixed attributes "
                          "on a namespace, but got '",
                          target.attr, "'.")),
                  target.offset);
      }
      if (Value* slot = ns.ns().Find(target.attr)) {
        *slot = v;
      } else {
        ns.ns().attrs.emplace_back(target.attr, v);
      }
      return absl::OkStatus();
    }
    case ExprKind::kTuple: {
      auto items = Iterate(v);
      if (!items.ok()) return At(items.status(), target.offset);
      if (items->size() != target.items.size()) {
        return At(ValueError(items->size() > target.items.size()
                                 ? Cat("too many values to unpack (expected ",
                                       target.items.size(), ")")
                                 : Cat("not enough values to unpack (expected ",
                                       target.items.size(), ", got ",
                                       items->size(), ")")),
                  target.offset);
      }
      for (size_t i = 0; i < items->size(); ++i) {
        TANDEM_RETURN_IF_ERROR(Assign(*target.items[i], (*items)[i]));
      }
      return absl::OkStatus();
    }
    default:
      return At(absl::InvalidArgumentError("cannot assign to this expression"),
                target.offset);
  }
}

absl::Status Interpreter::ExecBody(const Body& body) {
  for (const StmtPtr& s : body) {
    TANDEM_RETURN_IF_ERROR(Exec(*s));
    if (pending_ != Pending::kNone) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Exec(const Stmt& s) {
  TANDEM_RETURN_IF_ERROR(Charge(1));
  TANDEM_RETURN_IF_ERROR(CheckStack());
  absl::Status st;
  switch (s.kind) {
    case StmtKind::kText:
      return Write(s.text);
    case StmtKind::kOutput: {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      if (v.is_string()) return Write(v.str());
      auto text = Str(v);
      if (!text.ok()) return At(text.status(), s.offset);
      return Write(*text);
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        TANDEM_ASSIGN_OR_RETURN(Value c, Eval(*cond));
        if (Truthy(c)) return ExecBody(body);
      }
      return ExecBody(s.else_body);
    case StmtKind::kFor:
      return ExecFor(s);
    case StmtKind::kSet: {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      return Assign(*s.target, v);
    }
    case StmtKind::kSetBlock: {
      TANDEM_ASSIGN_OR_RETURN(std::string text, Capture(s.body, true));
      Value v = Value::String(std::move(text));
      if (s.filter) {
        TANDEM_ASSIGN_OR_RETURN(v, ApplyFilterChain(*s.filter, std::move(v)));
      }
      return Assign(*s.target, v);
    }
    case StmtKind::kMacro:
      SetVar(s.name, MakeMacro(s, s.name));
      return absl::OkStatus();
    case StmtKind::kCallBlock:
      return ExecCallBlock(s);
    case StmtKind::kFilterBlock: {
      TANDEM_ASSIGN_OR_RETURN(std::string text, Capture(s.body, true));
      TANDEM_ASSIGN_OR_RETURN(
          Value v, ApplyFilterChain(*s.filter, Value::String(std::move(text))));
      TANDEM_ASSIGN_OR_RETURN(std::string shown, Str(v));
      return Write(shown);
    }
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const ExprPtr& e : s.with_values) {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e));
        values.push_back(std::move(v));
      }
      std::shared_ptr<Frame> saved = frame_;
      frame_ = std::make_shared<Frame>();
      frame_->parent = saved;
      for (size_t i = 0; i < values.size() && st.ok(); ++i) {
        st = Assign(*s.with_targets[i], values[i]);
      }
      if (st.ok()) st = ExecBody(s.body);
      frame_ = std::move(saved);
      return st;
    }
    case StmtKind::kScope: {
      std::shared_ptr<Frame> saved = frame_;
      frame_ = std::make_shared<Frame>();
      frame_->parent = saved;
      st = ExecBody(s.body);
      frame_ = std::move(saved);
      return st;
    }
    case StmtKind::kBreak:
      pending_ = Pending::kBreak;
      return absl::OkStatus();
    case StmtKind::kContinue:
      pending_ = Pending::kContinue;
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecFor(const Stmt& s) {
  TANDEM_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
  auto all = Iterate(iterable);
  if (!all.ok()) return At(all.status(), s.expr->offset);
  std::vector<Value> items;
  std::shared_ptr<Frame> saved = frame_;
  if (s.cond) {
    for (Value& item : *all) {
      frame_ = std::make_shared<Frame>();
      frame_->parent = saved;
      absl::Status st = Assign(*s.target, item);
      absl::StatusOr<Value> keep =
          st.ok() ? Eval(*s.cond) : absl::StatusOr<Value>(st);
      frame_ = saved;
      if (!keep.ok()) return keep.status();
      if (Truthy(*keep)) items.push_back(std::move(item));
    }
  } else {
    items = std::move(*all);
  }
  if (items.empty()) {
    frame_ = std::make_shared<Frame>();
    frame_->parent = saved;
    absl::Status st = ExecBody(s.else_body);
    frame_ = std::move(saved);
    return st;
  }
  const auto n = static_cast<int64_t>(items.size());
  enum Key {
    kIndex,
    kIndex0,
    kRevindex,
    kRevindex0,
    kFirst,
    kLast,
    kLength,
    kDepth,
    kDepth0,
    kPrevitem,
    kNextitem,
    kCycle,
    kNumKeys
  };
  static const Value* const kKeys = [] {
    auto* keys = new Value[kNumKeys];
    const char* names[] = {"index",  "index0",   "revindex", "revindex0",
                           "first",  "last",     "length",   "depth",
                           "depth0", "previtem", "nextitem", "cycle"};
    for (int k = 0; k < kNumKeys; ++k) keys[k] = Value::String(names[k]);
    return keys;
  }();
  std::shared_ptr<Frame> iter_frame;
  for (int64_t i = 0; i < n; ++i) {
    TANDEM_RETURN_IF_ERROR(Charge(2));
    // One scope per iteration: reuse it unless a macro defined in the body
    // closed over it.
    if (iter_frame && !iter_frame->captured) {
      iter_frame->vars.clear();
    } else {
      iter_frame = std::make_shared<Frame>();
      iter_frame->parent = saved;
    }
    frame_ = iter_frame;
    absl::Status st = Assign(*s.target, items[static_cast<size_t>(i)]);
    if (st.ok() && s.uses_loop) {
      std::vector<std::pair<Value, Value>> loop;
      loop.reserve(kNumKeys);
      loop.emplace_back(kKeys[kIndex], Value::Int(i + 1));
      loop.emplace_back(kKeys[kIndex0], Value::Int(i));
      loop.emplace_back(kKeys[kRevindex], Value::Int(n - i));
      loop.emplace_back(kKeys[kRevindex0], Value::Int(n - i - 1));
      loop.emplace_back(kKeys[kFirst], Value::Bool(i == 0));
      loop.emplace_back(kKeys[kLast], Value::Bool(i == n - 1));
      loop.emplace_back(kKeys[kLength], Value::Int(n));
      loop.emplace_back(kKeys[kDepth], Value::Int(1));
      loop.emplace_back(kKeys[kDepth0], Value::Int(0));
      if (i > 0)
        loop.emplace_back(kKeys[kPrevitem], items[static_cast<size_t>(i - 1)]);
      if (i < n - 1)
        loop.emplace_back(kKeys[kNextitem], items[static_cast<size_t>(i + 1)]);
      loop.emplace_back(
          kKeys[kCycle],
          Value::Callable(
              "loop.cycle",
              [i](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
                if (a.args.empty())
                  return TypeError("no items for cycling given");
                return a.args[static_cast<size_t>(i) % a.args.size()];
              }));
      SetVar("loop", Value::Dict(std::move(loop)));
    }
    if (st.ok()) st = ExecBody(s.body);
    frame_ = saved;
    if (!st.ok()) return st;
    if (pending_ == Pending::kBreak) {
      pending_ = Pending::kNone;
      break;
    }
    pending_ = Pending::kNone;
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::ApplyFilterChain(const Expr& chain,
                                                    Value input) {
  Value v = std::move(input);
  if (chain.a) {
    TANDEM_ASSIGN_OR_RETURN(v, ApplyFilterChain(*chain.a, std::move(v)));
  }
  TANDEM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(chain.call));
  auto r = CallFilter(chain.name, v, std::move(args));
  if (!r.ok()) return At(r.status(), chain.offset);
  return r;
}

Value Interpreter::MakeMacro(const Stmt& s, std::string name) {
  frame_->captured = true;
  std::weak_ptr<Frame> closure = frame_;
  const Stmt* def = &s;
  return Value::Callable(
      name, [this, def, name, closure](Interpreter&, CallArgs& args) {
        return InvokeMacro(*def, name, closure, args);
      });
}

absl::StatusOr<Value> Interpreter::InvokeMacro(
    const Stmt& s, const std::string& name, const std::weak_ptr<Frame>& closure,
    CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return absl::InvalidArgumentError(
        Cat("macro calls nested deeper than the limit of ",
            limits_.max_call_depth));
  }
  const size_t n = s.params.size();
  std::vector<std::optional<Value>> bound(n);
  std::vector<Value> extra_pos;
  std::vector<std::pair<Value, Value>> extra_kw;
  std::optional<Value> caller;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < n) {
      bound[i] = std::move(args.args[i]);
    } else {
      extra_pos.push_back(std::move(args.args[i]));
    }
  }
  if (!extra_pos.empty() && !s.uses_varargs) {
    return TypeError(
        Cat("macro '", name, "' takes not more than ", n, " argument(s)"));
  }
  for (auto& [key, value] : args.kwargs) {
    auto it = std::find(s.params.begin(), s.params.end(), key);
    if (it != s.params.end()) {
      const auto idx = static_cast<size_t>(it - s.params.begin());
      if (bound[idx]) {
        return TypeError(Cat("macro '", name,
                             "' got multiple values for argument '", key, "'"));
      }
      bound[idx] = std::move(value);
    } else if (key == "caller" && s.uses_caller) {
      caller = std::move(value);
    } else if (s.uses_kwargs) {
      extra_kw.emplace_back(Value::String(key), std::move(value));
    } else {
      return TypeError(
          Cat("macro '", name, "' takes no keyword argument '", key, "'"));
    }
  }

  std::shared_ptr<Frame> parent = closure.lock();
  if (!parent) parent = root_;
  std::shared_ptr<Frame> saved_frame = frame_;
  std::string* saved_out = out_;
  frame_ = std::make_shared<Frame>();
  frame_->parent = std::move(parent);
  std::string buf;
  out_ = &buf;
  ++call_depth_;
  absl::Status st;
  for (size_t i = 0; i < n && st.ok(); ++i) {
    if (bound[i]) {
      SetVar(s.params[i], std::move(*bound[i]));
    } else if (s.defaults[i]) {
      absl::StatusOr<Value> d = Eval(*s.defaults[i]);
      if (d.ok()) {
        SetVar(s.params[i], std::move(*d));
      } else {
        st = d.status();
      }
    } else {
      SetVar(s.params[i], Value::Undefined(Cat("parameter '", s.params[i],
                                               "' was not provided")));
    }
  }
  if (s.uses_caller)
    SetVar("caller", caller ? *caller : Value::Undefined("No caller defined"));
  if (s.uses_varargs)
    SetVar("varargs", Value::List(std::move(extra_pos), ListKind::kTuple));
  if (s.uses_kwargs) SetVar("kwargs", Value::Dict(std::move(extra_kw)));
  if (st.ok()) st = ExecBody(s.body);
  pending_ = Pending::kNone;
  --call_depth_;
  out_ = saved_out;
  frame_ = std::move(saved_frame);
  if (!st.ok()) return st;
  return Value::String(std::move(buf));
}

absl::Status Interpreter::ExecCallBlock(const Stmt& s) {
  const Expr& call = *s.expr;
  TANDEM_ASSIGN_OR_RETURN(Value callee, Eval(*call.a));
  TANDEM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call.call));
  args.kwargs.emplace_back("caller", MakeMacro(s, "caller"));
  auto r = Call(callee, std::move(args));
  if (!r.ok()) return At(r.status(), call.offset);
  TANDEM_ASSIGN_OR_RETURN(std::string text, Str(*r));
  return Write(text);
}

}  // namespace tandem::jinja
