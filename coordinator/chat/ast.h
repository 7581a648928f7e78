// Syntax tree of a parsed Jinja template (the subset chat templates use).
#ifndef TANDEM_COORDINATOR_CHAT_AST_H_
#define TANDEM_COORDINATOR_CHAT_AST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/chat/value.h"

namespace tandem::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,    // value
  kName,     // name
  kNsRef,    // name.attr as an assignment target: name, attr
  kList,     // items
  kTuple,    // items
  kDict,     // items: key, value, key, value, ...
  kGetAttr,  // a.attr: a, name
  kGetItem,  // a[b]: a, b
  kSlice,    // [a:b:c], any of them null
  kCall,     // a(args)
  kFilter,   // a | name(args); a is null inside {% filter %} / {% set %} blocks
  kTest,     // a is name(args)
  kUnary,    // op a
  kBinary,   // a op b
  kConcat,   // items joined with ~
  kCompare,  // a op1 c1 op2 c2 ...: a, compare
  kCond,     // b if a else c (c may be null)
};

enum class Op : uint8_t {
  kNone,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kAnd,
  kOr,
  kNot,
  kNeg,
  kPos,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kIn,
  kNotIn,
};

struct CallArgsExpr {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;    // *args
  ExprPtr dyn_kwargs;  // **kwargs
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  uint32_t offset = 0;  // byte offset in the source, for messages
  int32_t depth = 1;    // height of this subtree (bounded by the parser)
  // kPow whose base jinja2 constant-folds and whose exponent it does not:
  // jinja2 then emits e.g. `-3 ** x`, which Python reads as -(3 ** x).
  bool neg_pow_quirk = false;
  Value value;
  std::string name;
  std::string attr;
  Op op = Op::kNone;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<Op, ExprPtr>> compare;
  CallArgsExpr call;
};

enum class StmtKind : uint8_t {
  kText,       // text
  kOutput,     // {{ expr }}
  kIf,         // branches, else_body
  kFor,        // target, iter, cond, body, else_body
  kSet,        // target = expr
  kSetBlock,   // {% set target | filter %}body{% endset %}
  kMacro,      // name, params, defaults, body
  kCallBlock,  // {% call(params) expr %}body{% endcall %}
  kFilterBlock,
  kWith,   // with_targets = with_values, body
  kScope,  // body rendered in place ({% block %}, {% generation %}, ...)
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  uint32_t offset = 0;
  std::string text;
  ExprPtr expr;    // output / set value / for iterable / call-block call
  ExprPtr target;  // for / set target
  ExprPtr cond;    // for filter
  ExprPtr filter;  // set-block / filter-block filter chain
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif
  Body body;
  Body else_body;
  // Macros and call blocks.
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param; null when none
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  // for: whether the body mentions `loop` (otherwise no loop object is built).
  bool uses_loop = false;
  // with
  std::vector<ExprPtr> with_targets;
  std::vector<ExprPtr> with_values;
};

struct Template {
  std::string source;  // normalized source (for positions in messages)
  Body body;
};

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_AST_H_
