// The parser's class, shared by parser.cc (statements) and parser_expr.cc
// (expressions). Internal to the chat library.
#ifndef TANDEM_COORDINATOR_CHAT_PARSER_IMPL_H_
#define TANDEM_COORDINATOR_CHAT_PARSER_IMPL_H_

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/chat/ast.h"
#include "coordinator/chat/lexer.h"
#include "coordinator/chat/parser.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja::parser_internal {

using Names = std::vector<std::string>;

class Parser {
 public:
  explicit Parser(LexResult lex)
      : src_(std::move(lex.source)), toks_(std::move(lex.tokens)) {}

  absl::StatusOr<std::shared_ptr<const Template>> Run() {
    auto tmpl = std::make_shared<Template>();
    TANDEM_ASSIGN_OR_RETURN(tmpl->body, Subparse(nullptr));
    tmpl->source = std::move(src_);
    return std::shared_ptr<const Template>(std::move(tmpl));
  }

 private:
  // ---- token stream ----
  const Token& Cur() const { return toks_[i_]; }
  const Token& Look() const {
    return toks_[std::min(i_ + 1, toks_.size() - 1)];
  }
  const Token& Next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  bool IsName(std::string_view v) const {
    return Cur().type == TokenType::kName && Cur().value == v;
  }
  bool IsOp(std::string_view v) const {
    return Cur().type == TokenType::kOp && Cur().value == v;
  }
  bool SkipName(std::string_view v) {
    if (!IsName(v)) return false;
    Next();
    return true;
  }
  bool SkipOp(std::string_view v) {
    if (!IsOp(v)) return false;
    Next();
    return true;
  }

  absl::Status Fail(std::string_view msg, size_t offset) const {
    const SourcePos p = PosOf(src_, offset);
    return absl::InvalidArgumentError(Cat("template syntax error at line ",
                                          p.line, ", column ", p.column, ": ",
                                          msg));
  }
  absl::Status Fail(std::string_view msg) const {
    return Fail(msg, Cur().offset);
  }

  absl::Status ExpectFailure(std::string_view what) const {
    if (Cur().type == TokenType::kEof) {
      return Fail(Cat("unexpected end of template, expected '", what, "'."));
    }
    return Fail(
        Cat("expected token '", what, "', got '", DescribeToken(Cur()), "'"));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return ExpectFailure(op);
    return absl::OkStatus();
  }
  absl::Status ExpectType(TokenType type) {
    if (Cur().type != type) {
      Token want;
      want.type = type;
      return ExpectFailure(DescribeToken(want));
    }
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return ExpectFailure("name");
    return Next().value;
  }
  absl::Status ExpectNameValue(std::string_view v) {
    if (!SkipName(v)) return ExpectFailure(Cat("name:", v));
    return absl::OkStatus();
  }

  // Nesting guard for recursion through statements, parentheses and unary ops.
  struct Nest {
    explicit Nest(int* d) : depth(d) { ++*depth; }
    ~Nest() { --*depth; }
    int* depth;
  };
  absl::Status CheckNesting() const {
    if (depth_ > kMaxParseNesting) return Fail("template is nested too deeply");
    return absl::OkStatus();
  }

  ExprPtr Make(ExprKind kind, uint32_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // Computes the subtree height and enforces kMaxExprDepth.
  absl::StatusOr<ExprPtr> Done(ExprPtr e) {
    int32_t d = 0;
    auto see = [&d](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    see(e->a), see(e->b), see(e->c);
    for (const auto& c : e->items) see(c);
    for (const auto& [op, c] : e->compare) see(c);
    for (const auto& c : e->call.args) see(c);
    for (const auto& [k, c] : e->call.kwargs) see(c);
    see(e->call.dyn_args), see(e->call.dyn_kwargs);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth)
      return Fail("expression is nested too deeply", e->offset);
    return e;
  }

  // ---- statements (parser.cc) ----
  absl::Status FailEof(const Names* end_tokens) const;
  absl::StatusOr<Body> Subparse(const Names* end_tokens);
  absl::StatusOr<Body> ParseStatements(Names end_tokens, bool drop_needle);
  absl::StatusOr<StmtPtr> ParseStatement(const Names* end_tokens);
  absl::Status ParseFor(Stmt* s);
  absl::Status ParseIf(Stmt* s);
  absl::Status ParseSet(Stmt* s);
  absl::Status ParseSignature(Stmt* s);
  // Parses a macro-like body (macro or call block), recording which of the
  // implicit names caller/varargs/kwargs it uses.
  absl::Status ParseMacroBody(Stmt* s, std::string end_tag);
  absl::Status ParseMacro(Stmt* s);
  absl::Status ParseCallBlock(Stmt* s);
  absl::Status ParseFilterBlock(Stmt* s);
  absl::Status ParseWith(Stmt* s);
  // {% block name %}, {% generation %} (transformers' extension), {% autoescape
  // x %} and {% print a, b %}: all render their body in place, in a new scope.
  absl::Status ParseScopeLike(const std::string& tag, Stmt* s);
  absl::StatusOr<ExprPtr> ParseAssignTarget(bool with_tuple, bool name_only,
                                            const Names* extra_end_rules,
                                            bool with_namespace);
  static bool CanAssign(const Expr& e);

  // ---- expressions (parser_expr.cc) ----
  bool IsTupleEnd(const Names* extra_end_rules) const;
  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                                     const Names* extra_end_rules,
                                     bool explicit_parentheses,
                                     bool with_namespace);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseCondExpr();
  absl::StatusOr<ExprPtr> ParseBinaryChain(
      absl::StatusOr<ExprPtr> (Parser::*sub)(),
      std::initializer_list<std::pair<const char*, Op>> ops, bool names);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  // Whether jinja2's optimizer would fold the expression to a constant.
  static bool IsConst(const Expr& e);
  absl::StatusOr<ExprPtr> ParseUnaryFiltered();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary(bool with_namespace);
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscribed();
  absl::Status ParseCallArgs(CallArgsExpr* call);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr node);
  absl::StatusOr<std::string> ParseDottedName();
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);

  std::string src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> tag_stack_;
  std::vector<Stmt*> macro_scan_;
  std::vector<Stmt*> loop_scan_;
};

}  // namespace tandem::jinja::parser_internal

#endif  // TANDEM_COORDINATOR_CHAT_PARSER_IMPL_H_
