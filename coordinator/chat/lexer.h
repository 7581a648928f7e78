// Tokenizer for Jinja templates, matching jinja2 3.1's lexer as transformers
// configures it: trim_blocks=True, lstrip_blocks=True, the default delimiters,
// no line statements, keep_trailing_newline=False. Comments are dropped and
// `{% raw %}` bodies become template data here, as in jinja2.
#ifndef TANDEM_COORDINATOR_CHAT_LEXER_H_
#define TANDEM_COORDINATOR_CHAT_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::jinja {

enum class TokenType : uint8_t {
  kData,        // template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value holds the decoded string
  kInt,
  kFloat,
  kOp,  // value holds the operator: "+", "//", "(", ...
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  uint32_t offset = 0;  // byte offset in the normalized source
};

struct SourcePos {
  int line = 1;
  int column = 1;  // 1-based, in bytes
};

struct LexResult {
  // The source with \r\n and \r turned into \n and one trailing newline
  // removed, as jinja2 does before lexing. Token offsets point into it.
  std::string source;
  std::vector<Token> tokens;  // ends with kEof
};

// Syntax errors are InvalidArgument with "line L, column C".
absl::StatusOr<LexResult> Tokenize(std::string_view source);

SourcePos PosOf(std::string_view source, size_t offset);

// How jinja2 names a token in messages ("end of print statement", "'+'", ...).
std::string DescribeToken(const Token& t);

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_LEXER_H_
