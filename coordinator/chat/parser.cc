// Parsing of statements ({% ... %} tags and template text).
#include "coordinator/chat/parser_impl.h"

namespace tandem::jinja {
namespace parser_internal {

absl::Status Parser::FailEof(const Names* end_tokens) const {
  std::string msg = "Unexpected end of template.";
  if (end_tokens != nullptr && !end_tokens->empty()) {
    std::vector<std::string> quoted;
    for (const auto& t : *end_tokens) quoted.push_back(Cat("'", t, "'"));
    AppendCat(&msg, " Jinja was looking for the following tags: ",
              absl::StrJoin(quoted, " or "), ".");
  }
  if (!tag_stack_.empty()) {
    AppendCat(&msg, " The innermost block that needs to be closed is '",
              tag_stack_.back(), "'.");
  }
  return Fail(msg);
}

absl::StatusOr<Body> Parser::Subparse(const Names* end_tokens) {
  Nest nest(&depth_);
  TANDEM_RETURN_IF_ERROR(CheckNesting());
  Body body;
  while (Cur().type != TokenType::kEof) {
    const Token& t = Cur();
    if (t.type == TokenType::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->offset = t.offset;
      s->text = t.value;
      body.push_back(std::move(s));
      Next();
    } else if (t.type == TokenType::kVarBegin) {
      Next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->offset = Cur().offset;
      TANDEM_ASSIGN_OR_RETURN(s->expr,
                              ParseTuple(false, true, nullptr, false, false));
      TANDEM_RETURN_IF_ERROR(ExpectType(TokenType::kVarEnd));
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      Next();
      if (end_tokens != nullptr && Cur().type == TokenType::kName &&
          std::find(end_tokens->begin(), end_tokens->end(), Cur().value) !=
              end_tokens->end()) {
        return body;
      }
      TANDEM_ASSIGN_OR_RETURN(StmtPtr s, ParseStatement(end_tokens));
      body.push_back(std::move(s));
      TANDEM_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
    } else {
      return Fail(Cat("unexpected '", DescribeToken(t), "'"));
    }
  }
  if (end_tokens != nullptr) return FailEof(end_tokens);
  return body;
}

absl::StatusOr<Body> Parser::ParseStatements(Names end_tokens,
                                             bool drop_needle) {
  SkipOp(":");
  TANDEM_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
  TANDEM_ASSIGN_OR_RETURN(Body body, Subparse(&end_tokens));
  if (drop_needle) Next();
  return body;
}

absl::StatusOr<StmtPtr> Parser::ParseStatement(const Names* end_tokens) {
  if (Cur().type != TokenType::kName) return Fail("tag name expected");
  const std::string tag = Cur().value;
  auto s = std::make_unique<Stmt>();
  s->offset = Cur().offset;
  tag_stack_.push_back(tag);
  absl::Status st;
  if (tag == "for") {
    st = ParseFor(s.get());
  } else if (tag == "if") {
    st = ParseIf(s.get());
  } else if (tag == "set") {
    st = ParseSet(s.get());
  } else if (tag == "macro") {
    st = ParseMacro(s.get());
  } else if (tag == "call") {
    st = ParseCallBlock(s.get());
  } else if (tag == "filter") {
    st = ParseFilterBlock(s.get());
  } else if (tag == "with") {
    st = ParseWith(s.get());
  } else if (tag == "block" || tag == "generation" || tag == "autoescape" ||
             tag == "print") {
    st = ParseScopeLike(tag, s.get());
  } else if (tag == "break" || tag == "continue") {
    Next();
    if (loop_depth_ == 0)
      st = Fail(Cat("'", tag, "' outside of a loop"), s->offset);
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
  } else if (tag == "extends" || tag == "include" || tag == "import" ||
             tag == "from") {
    st = Fail(Cat(
        "the '", tag,
        "' tag is not supported: chat templates cannot load other templates"));
  } else {
    tag_stack_.pop_back();
    std::string msg = Cat("Encountered unknown tag '", tag, "'.");
    if (end_tokens != nullptr && !end_tokens->empty()) {
      std::vector<std::string> quoted;
      for (const auto& t : *end_tokens) quoted.push_back(Cat("'", t, "'"));
      AppendCat(&msg, " Jinja was looking for the following tags: ",
                absl::StrJoin(quoted, " or "), ".");
    }
    if (!tag_stack_.empty()) {
      AppendCat(&msg, " The innermost block that needs to be closed is '",
                tag_stack_.back(), "'.");
    }
    return Fail(msg);
  }
  tag_stack_.pop_back();
  if (!st.ok()) return st;
  return s;
}

absl::Status Parser::ParseFor(Stmt* s) {
  Next();
  s->kind = StmtKind::kFor;
  const Names in_rule = {"in"};
  TANDEM_ASSIGN_OR_RETURN(s->target,
                          ParseAssignTarget(true, false, &in_rule, false));
  TANDEM_RETURN_IF_ERROR(ExpectNameValue("in"));
  const Names rec_rule = {"recursive"};
  TANDEM_ASSIGN_OR_RETURN(s->expr,
                          ParseTuple(false, false, &rec_rule, false, false));
  if (SkipName("if")) {
    TANDEM_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
  }
  if (IsName("recursive")) return Fail("recursive for loops are not supported");
  ++loop_depth_;
  loop_scan_.push_back(s);
  auto body = ParseStatements({"endfor", "else"}, false);
  loop_scan_.pop_back();
  --loop_depth_;
  if (!body.ok()) return body.status();
  s->body = std::move(*body);
  if (Next().value == "else") {
    TANDEM_ASSIGN_OR_RETURN(s->else_body, ParseStatements({"endfor"}, true));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseIf(Stmt* s) {
  Next();
  s->kind = StmtKind::kIf;
  while (true) {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr test,
                            ParseTuple(false, false, nullptr, false, false));
    TANDEM_ASSIGN_OR_RETURN(Body body,
                            ParseStatements({"elif", "else", "endif"}, false));
    s->branches.emplace_back(std::move(test), std::move(body));
    const std::string t = Next().value;
    if (t == "elif") continue;
    if (t == "else") {
      TANDEM_ASSIGN_OR_RETURN(s->else_body, ParseStatements({"endif"}, true));
    }
    return absl::OkStatus();
  }
}

absl::Status Parser::ParseSet(Stmt* s) {
  Next();
  TANDEM_ASSIGN_OR_RETURN(s->target,
                          ParseAssignTarget(true, false, nullptr, true));
  if (SkipOp("=")) {
    s->kind = StmtKind::kSet;
    TANDEM_ASSIGN_OR_RETURN(s->expr,
                            ParseTuple(false, true, nullptr, false, false));
    return absl::OkStatus();
  }
  s->kind = StmtKind::kSetBlock;
  if (IsOp("|")) {
    TANDEM_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, false));
  }
  TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endset"}, true));
  return absl::OkStatus();
}

absl::Status Parser::ParseSignature(Stmt* s) {
  TANDEM_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!s->params.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectName());
    ExprPtr def;
    if (SkipOp("=")) {
      TANDEM_ASSIGN_OR_RETURN(def, ParseExpression(true));
    } else if (!s->defaults.empty() && s->defaults.back() != nullptr) {
      return Fail("non-default argument follows default argument");
    }
    s->params.push_back(std::move(name));
    s->defaults.push_back(std::move(def));
  }
  return ExpectOp(")");
}

// Parses a macro-like body (macro or call block), recording which of the
// implicit names caller/varargs/kwargs it uses.
absl::Status Parser::ParseMacroBody(Stmt* s, std::string end_tag) {
  macro_scan_.push_back(s);
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  auto body = ParseStatements({std::move(end_tag)}, true);
  loop_depth_ = saved_loop_depth;
  macro_scan_.pop_back();
  if (!body.ok()) return body.status();
  s->body = std::move(*body);
  return absl::OkStatus();
}

absl::Status Parser::ParseMacro(Stmt* s) {
  Next();
  s->kind = StmtKind::kMacro;
  TANDEM_ASSIGN_OR_RETURN(s->name, ExpectName());
  TANDEM_RETURN_IF_ERROR(ParseSignature(s));
  return ParseMacroBody(s, "endmacro");
}

absl::Status Parser::ParseCallBlock(Stmt* s) {
  Next();
  s->kind = StmtKind::kCallBlock;
  if (IsOp("(")) TANDEM_RETURN_IF_ERROR(ParseSignature(s));
  const uint32_t at = Cur().offset;
  TANDEM_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
  if (s->expr->kind != ExprKind::kCall) return Fail("expected call", at);
  return ParseMacroBody(s, "endcall");
}

absl::Status Parser::ParseFilterBlock(Stmt* s) {
  Next();
  s->kind = StmtKind::kFilterBlock;
  TANDEM_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, true));
  TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endfilter"}, true));
  return absl::OkStatus();
}

absl::Status Parser::ParseWith(Stmt* s) {
  Next();
  s->kind = StmtKind::kWith;
  while (Cur().type != TokenType::kBlockEnd) {
    if (!s->with_targets.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    TANDEM_ASSIGN_OR_RETURN(ExprPtr target,
                            ParseAssignTarget(true, false, nullptr, false));
    TANDEM_RETURN_IF_ERROR(ExpectOp("="));
    TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
    s->with_targets.push_back(std::move(target));
    s->with_values.push_back(std::move(value));
  }
  TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endwith"}, true));
  return absl::OkStatus();
}

// {% block name %}, {% generation %} (transformers' extension), {% autoescape x
// %} and {% print a, b %}: all render their body in place, in a new scope.
absl::Status Parser::ParseScopeLike(const std::string& tag, Stmt* s) {
  Next();
  s->kind = StmtKind::kScope;
  if (tag == "print") {
    while (Cur().type != TokenType::kBlockEnd) {
      if (!s->body.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      auto out = std::make_unique<Stmt>();
      out->kind = StmtKind::kOutput;
      out->offset = Cur().offset;
      TANDEM_ASSIGN_OR_RETURN(out->expr, ParseExpression(true));
      s->body.push_back(std::move(out));
    }
    return absl::OkStatus();
  }
  if (tag == "block") {
    TANDEM_ASSIGN_OR_RETURN(s->name, ExpectName());
    SkipName("scoped");
    SkipName("required");
    if (IsOp("-"))
      return Fail("Block names in Jinja have to be valid Python identifiers");
  } else if (tag == "autoescape") {
    TANDEM_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
  }
  TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({Cat("end", tag)}, true));
  if (tag == "block") SkipName(s->name);
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseAssignTarget(bool with_tuple,
                                                  bool name_only,
                                                  const Names* extra_end_rules,
                                                  bool with_namespace) {
  ExprPtr target;
  if (name_only) {
    const uint32_t at = Cur().offset;
    TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectName());
    target = Make(ExprKind::kName, at);
    target->name = std::move(name);
  } else if (with_tuple) {
    TANDEM_ASSIGN_OR_RETURN(
        target, ParseTuple(true, true, extra_end_rules, false, with_namespace));
  } else {
    TANDEM_ASSIGN_OR_RETURN(target, ParsePrimary(with_namespace));
  }
  if (!CanAssign(*target)) {
    return Fail(
        Cat("can't assign to '",
            target->kind == ExprKind::kConst ? "const" : "expression", "'"),
        target->offset);
  }
  return target;
}

bool Parser::CanAssign(const Expr& e) {
  if (e.kind == ExprKind::kName || e.kind == ExprKind::kNsRef) return true;
  if (e.kind != ExprKind::kTuple) return false;
  return std::all_of(e.items.begin(), e.items.end(), [](const ExprPtr& x) {
    return x->kind == ExprKind::kName || CanAssign(*x);
  });
}

}  // namespace parser_internal

absl::StatusOr<std::shared_ptr<const Template>> ParseTemplate(
    std::string_view source) {
  TANDEM_ASSIGN_OR_RETURN(LexResult lex, Tokenize(source));
  return parser_internal::Parser(std::move(lex)).Run();
}

}  // namespace tandem::jinja
