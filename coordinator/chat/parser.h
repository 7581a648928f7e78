// Parser for the Jinja subset (recursive descent, following jinja2 3.1's
// grammar and operator precedence, including its quirks: `**` is left
// associative and binds looser than unary minus, filters bind tighter than
// binary operators).
#ifndef TANDEM_COORDINATOR_CHAT_PARSER_H_
#define TANDEM_COORDINATOR_CHAT_PARSER_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/chat/ast.h"

namespace tandem::jinja {

// Nesting bounds that keep parsing and evaluation recursion shallow.
inline constexpr int kMaxParseNesting = 100;  // statements and parentheses
inline constexpr int kMaxExprDepth = 250;     // height of an expression tree

// Syntax errors are InvalidArgument with "line L, column C".
absl::StatusOr<std::shared_ptr<const Template>> ParseTemplate(
    std::string_view source);

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_PARSER_H_
