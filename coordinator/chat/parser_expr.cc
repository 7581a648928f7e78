// Parsing of expressions, following jinja2's grammar and precedence.
#include "coordinator/chat/parser_impl.h"

namespace tandem::jinja::parser_internal {

bool Parser::IsTupleEnd(const Names* extra_end_rules) const {
  const Token& t = Cur();
  if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd ||
      (t.type == TokenType::kOp && t.value == ")")) {
    return true;
  }
  if (extra_end_rules != nullptr && t.type == TokenType::kName) {
    return std::find(extra_end_rules->begin(), extra_end_rules->end(),
                     t.value) != extra_end_rules->end();
  }
  return false;
}

absl::StatusOr<ExprPtr> Parser::ParseTuple(bool simplified, bool with_condexpr,
                                           const Names* extra_end_rules,
                                           bool explicit_parentheses,
                                           bool with_namespace) {
  const uint32_t at = Cur().offset;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end_rules)) break;
    ExprPtr e;
    if (simplified) {
      TANDEM_ASSIGN_OR_RETURN(e, ParsePrimary(with_namespace));
    } else {
      TANDEM_ASSIGN_OR_RETURN(e, ParseExpression(with_condexpr));
    }
    args.push_back(std::move(e));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) {
      return Fail(
          Cat("Expected an expression, got '", DescribeToken(Cur()), "'"));
    }
  }
  ExprPtr t = Make(ExprKind::kTuple, at);
  t->items = std::move(args);
  return Done(std::move(t));
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

absl::StatusOr<ExprPtr> Parser::ParseCondExpr() {
  const uint32_t at = Cur().offset;
  TANDEM_ASSIGN_OR_RETURN(ExprPtr expr1, ParseOr());
  while (SkipName("if")) {
    ExprPtr e = Make(ExprKind::kCond, at);
    TANDEM_ASSIGN_OR_RETURN(e->a, ParseOr());  // condition
    if (SkipName("else")) {
      Nest nest(&depth_);
      TANDEM_RETURN_IF_ERROR(CheckNesting());
      TANDEM_ASSIGN_OR_RETURN(e->c, ParseCondExpr());
    }
    e->b = std::move(expr1);
    TANDEM_ASSIGN_OR_RETURN(expr1, Done(std::move(e)));
  }
  return expr1;
}

absl::StatusOr<ExprPtr> Parser::ParseBinaryChain(
    absl::StatusOr<ExprPtr> (Parser::*sub)(),
    std::initializer_list<std::pair<const char*, Op>> ops, bool names) {
  const uint32_t at = Cur().offset;
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
  while (true) {
    Op op = Op::kNone;
    for (const auto& [text, o] : ops) {
      if (names ? IsName(text) : IsOp(text)) op = o;
    }
    if (op == Op::kNone) return left;
    Next();
    ExprPtr e = Make(ExprKind::kBinary, at);
    e->op = op;
    e->a = std::move(left);
    TANDEM_ASSIGN_OR_RETURN(e->b, (this->*sub)());
    TANDEM_ASSIGN_OR_RETURN(left, Done(std::move(e)));
  }
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  return ParseBinaryChain(&Parser::ParseAnd, {{"or", Op::kOr}}, true);
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  return ParseBinaryChain(&Parser::ParseNot, {{"and", Op::kAnd}}, true);
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    const uint32_t at = Next().offset;
    Nest nest(&depth_);
    TANDEM_RETURN_IF_ERROR(CheckNesting());
    ExprPtr e = Make(ExprKind::kUnary, at);
    e->op = Op::kNot;
    TANDEM_ASSIGN_OR_RETURN(e->a, ParseNot());
    return Done(std::move(e));
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const uint32_t at = Cur().offset;
  TANDEM_ASSIGN_OR_RETURN(ExprPtr expr, ParseMath1());
  std::vector<std::pair<Op, ExprPtr>> ops;
  while (true) {
    Op op = Op::kNone;
    if (Cur().type == TokenType::kOp) {
      const std::string& v = Cur().value;
      op = v == "=="   ? Op::kEq
           : v == "!=" ? Op::kNe
           : v == "<"  ? Op::kLt
           : v == "<=" ? Op::kLe
           : v == ">"  ? Op::kGt
           : v == ">=" ? Op::kGe
                       : Op::kNone;
      if (op != Op::kNone) Next();
    } else if (IsName("in")) {
      Next();
      op = Op::kIn;
    } else if (IsName("not") && Look().type == TokenType::kName &&
               Look().value == "in") {
      Next();
      Next();
      op = Op::kNotIn;
    }
    if (op == Op::kNone) break;
    TANDEM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
    ops.emplace_back(op, std::move(rhs));
  }
  if (ops.empty()) return expr;
  ExprPtr e = Make(ExprKind::kCompare, at);
  e->a = std::move(expr);
  e->compare = std::move(ops);
  return Done(std::move(e));
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  return ParseBinaryChain(&Parser::ParseConcat,
                          {{"+", Op::kAdd}, {"-", Op::kSub}}, false);
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  const uint32_t at = Cur().offset;
  TANDEM_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!IsOp("~")) return first;
  ExprPtr e = Make(ExprKind::kConcat, at);
  e->items.push_back(std::move(first));
  while (SkipOp("~")) {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
    e->items.push_back(std::move(next));
  }
  return Done(std::move(e));
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  return ParseBinaryChain(&Parser::ParsePow,
                          {{"*", Op::kMul},
                           {"/", Op::kDiv},
                           {"//", Op::kFloorDiv},
                           {"%", Op::kMod}},
                          false);
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  TANDEM_ASSIGN_OR_RETURN(
      ExprPtr e,
      ParseBinaryChain(&Parser::ParseUnaryFiltered, {{"**", Op::kPow}}, false));
  for (Expr* p = e.get(); p->kind == ExprKind::kBinary && p->op == Op::kPow;
       p = p->a.get()) {
    p->neg_pow_quirk = IsConst(*p->a) && !IsConst(*p->b);
  }
  return e;
}

// Whether jinja2's optimizer would fold the expression to a constant.
bool Parser::IsConst(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return true;
    case ExprKind::kName:
    case ExprKind::kNsRef:
    case ExprKind::kCall:
      return false;
    default:
      break;
  }
  auto all = [](const Expr* x) { return x == nullptr || IsConst(*x); };
  if (!all(e.a.get()) || !all(e.b.get()) || !all(e.c.get())) return false;
  for (const auto& x : e.items) {
    if (!IsConst(*x)) return false;
  }
  for (const auto& [op, x] : e.compare) {
    if (!IsConst(*x)) return false;
  }
  for (const auto& x : e.call.args) {
    if (!IsConst(*x)) return false;
  }
  for (const auto& [k, x] : e.call.kwargs) {
    if (!IsConst(*x)) return false;
  }
  return !e.call.dyn_args && !e.call.dyn_kwargs &&
         (e.kind != ExprKind::kFilter || e.a);
}

absl::StatusOr<ExprPtr> Parser::ParseUnaryFiltered() {
  return ParseUnary(true);
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  Nest nest(&depth_);
  TANDEM_RETURN_IF_ERROR(CheckNesting());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const bool neg = Cur().value == "-";
    ExprPtr e = Make(ExprKind::kUnary, Next().offset);
    e->op = neg ? Op::kNeg : Op::kPos;
    TANDEM_ASSIGN_OR_RETURN(e->a, ParseUnary(false));
    TANDEM_ASSIGN_OR_RETURN(node, Done(std::move(e)));
  } else {
    TANDEM_ASSIGN_OR_RETURN(node, ParsePrimary(false));
  }
  TANDEM_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    TANDEM_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary(bool with_namespace) {
  const Token& t = Cur();
  const uint32_t at = t.offset;
  if (t.type == TokenType::kName) {
    const std::string v = Next().value;
    ExprPtr e = Make(ExprKind::kConst, at);
    if (v == "true" || v == "True" || v == "false" || v == "False") {
      e->value = Value::Bool(v == "true" || v == "True");
    } else if (v == "none" || v == "None") {
      e->value = Value::None();
    } else if (with_namespace && IsOp(".")) {
      Next();
      e->kind = ExprKind::kNsRef;
      e->name = v;
      TANDEM_ASSIGN_OR_RETURN(e->attr, ExpectName());
    } else {
      e->kind = ExprKind::kName;
      e->name = v;
      if (v == "loop") {
        for (Stmt* f : loop_scan_) f->uses_loop = true;
      }
      if (v == "caller" || v == "varargs" || v == "kwargs") {
        for (Stmt* m : macro_scan_) {
          (v == "caller"    ? m->uses_caller
           : v == "varargs" ? m->uses_varargs
                            : m->uses_kwargs) = true;
        }
      }
    }
    return e;
  }
  if (t.type == TokenType::kString) {
    std::string s;
    while (Cur().type == TokenType::kString) s += Next().value;
    ExprPtr e = Make(ExprKind::kConst, at);
    e->value = Value::String(std::move(s));
    return e;
  }
  if (t.type == TokenType::kInt || t.type == TokenType::kFloat) {
    ExprPtr e = Make(ExprKind::kConst, at);
    e->value = t.type == TokenType::kInt ? Value::Int(t.int_value)
                                         : Value::Float(t.float_value);
    Next();
    return e;
  }
  if (IsOp("(")) {
    Next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e,
                            ParseTuple(false, true, nullptr, true, false));
    TANDEM_RETURN_IF_ERROR(ExpectOp(")"));
    return e;
  }
  if (IsOp("[") || IsOp("{")) {
    const bool dict = IsOp("{");
    const std::string close = dict ? "}" : "]";
    Next();
    ExprPtr e = Make(dict ? ExprKind::kDict : ExprKind::kList, at);
    while (!IsOp(close)) {
      if (!e->items.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(close)) break;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      e->items.push_back(std::move(item));
      if (dict) {
        TANDEM_RETURN_IF_ERROR(ExpectOp(":"));
        TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->items.push_back(std::move(value));
      }
    }
    TANDEM_RETURN_IF_ERROR(ExpectOp(close));
    return Done(std::move(e));
  }
  if (t.type == TokenType::kEof) return Fail("unexpected end of template");
  return Fail(Cat("unexpected '", DescribeToken(t), "'"));
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
    } else if (IsName("is")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const Token& t = Next();
  const uint32_t at = t.offset;
  if (t.value == ".") {
    const Token& attr = Cur();
    if (attr.type == TokenType::kName) {
      ExprPtr e = Make(ExprKind::kGetAttr, at);
      e->a = std::move(node);
      e->name = Next().value;
      return Done(std::move(e));
    }
    if (attr.type != TokenType::kInt) return Fail("expected name or number");
    ExprPtr e = Make(ExprKind::kGetItem, at);
    e->a = std::move(node);
    e->b = Make(ExprKind::kConst, attr.offset);
    e->b->value = Value::Int(attr.int_value);
    Next();
    return Done(std::move(e));
  }
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    TANDEM_ASSIGN_OR_RETURN(ExprPtr arg, ParseSubscribed());
    args.push_back(std::move(arg));
  }
  TANDEM_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr e = Make(ExprKind::kGetItem, at);
  e->a = std::move(node);
  if (args.size() == 1) {
    e->b = std::move(args[0]);
  } else {
    e->b = Make(ExprKind::kTuple, at);
    e->b->items = std::move(args);
    TANDEM_ASSIGN_OR_RETURN(e->b, Done(std::move(e->b)));
  }
  return Done(std::move(e));
}

absl::StatusOr<ExprPtr> Parser::ParseSubscribed() {
  const uint32_t at = Cur().offset;
  ExprPtr start;
  if (IsOp(":")) {
    Next();
  } else {
    TANDEM_ASSIGN_OR_RETURN(start, ParseExpression(true));
    if (!IsOp(":")) return start;
    Next();
  }
  ExprPtr e = Make(ExprKind::kSlice, at);
  e->a = std::move(start);
  if (!IsOp(":") && !IsOp("]") && !IsOp(",")) {
    TANDEM_ASSIGN_OR_RETURN(e->b, ParseExpression(true));
  }
  if (SkipOp(":")) {
    if (!IsOp("]") && !IsOp(",")) {
      TANDEM_ASSIGN_OR_RETURN(e->c, ParseExpression(true));
    }
  }
  return Done(std::move(e));
}

absl::Status Parser::ParseCallArgs(CallArgsExpr* call) {
  const uint32_t at = Cur().offset;
  TANDEM_RETURN_IF_ERROR(ExpectOp("("));
  bool require_comma = false;
  auto invalid = [&] {
    return Fail("invalid syntax for function call expression", at);
  };
  while (!IsOp(")")) {
    if (require_comma) {
      TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    if (IsOp("*")) {
      if (call->dyn_args || call->dyn_kwargs) return invalid();
      Next();
      TANDEM_ASSIGN_OR_RETURN(call->dyn_args, ParseExpression(true));
    } else if (IsOp("**")) {
      if (call->dyn_kwargs) return invalid();
      Next();
      TANDEM_ASSIGN_OR_RETURN(call->dyn_kwargs, ParseExpression(true));
    } else if (Cur().type == TokenType::kName &&
               Look().type == TokenType::kOp && Look().value == "=") {
      if (call->dyn_kwargs) return invalid();
      std::string key = Next().value;
      Next();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      call->kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (call->dyn_args || call->dyn_kwargs || !call->kwargs.empty())
        return invalid();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      call->args.push_back(std::move(value));
    }
    require_comma = true;
  }
  return ExpectOp(")");
}

absl::StatusOr<ExprPtr> Parser::ParseCall(ExprPtr node) {
  ExprPtr e = Make(ExprKind::kCall, Cur().offset);
  e->a = std::move(node);
  TANDEM_RETURN_IF_ERROR(ParseCallArgs(&e->call));
  return Done(std::move(e));
}

absl::StatusOr<std::string> Parser::ParseDottedName() {
  TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (SkipOp(".")) {
    TANDEM_ASSIGN_OR_RETURN(std::string part, ExpectName());
    AppendCat(&name, ".", part);
  }
  return name;
}

absl::StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) Next();
    start_inline = false;
    ExprPtr e = Make(ExprKind::kFilter, Cur().offset);
    TANDEM_ASSIGN_OR_RETURN(e->name, ParseDottedName());
    if (IsOp("(")) TANDEM_RETURN_IF_ERROR(ParseCallArgs(&e->call));
    e->a = std::move(node);
    TANDEM_ASSIGN_OR_RETURN(node, Done(std::move(e)));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  const uint32_t at = Next().offset;  // "is"
  const bool negated = SkipName("not");
  ExprPtr e = Make(ExprKind::kTest, at);
  TANDEM_ASSIGN_OR_RETURN(e->name, ParseDottedName());
  const TokenType ct = Cur().type;
  if (IsOp("(")) {
    TANDEM_RETURN_IF_ERROR(ParseCallArgs(&e->call));
  } else if ((ct == TokenType::kName || ct == TokenType::kString ||
              ct == TokenType::kInt || ct == TokenType::kFloat || IsOp("[") ||
              IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Fail("You cannot chain multiple tests with is");
    TANDEM_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary(false));
    TANDEM_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    e->call.args.push_back(std::move(arg));
  }
  e->a = std::move(node);
  TANDEM_ASSIGN_OR_RETURN(node, Done(std::move(e)));
  if (!negated) return node;
  ExprPtr n = Make(ExprKind::kUnary, at);
  n->op = Op::kNot;
  n->a = std::move(node);
  return Done(std::move(n));
}

}  // namespace tandem::jinja::parser_internal
