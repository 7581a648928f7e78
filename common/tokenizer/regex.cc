#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/tokenizer/regex.h"

#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tokenizer/unicode.h"

namespace tandem::tok {
namespace {

// Per-thread match state: a JIT stack big enough for long runs of spaces,
// and match data with room for a few capture groups (only group 0 is used).
struct MatchState {
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_match_data* data = nullptr;

  MatchState() {
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (jit_stack != nullptr && context != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
    data = pcre2_match_data_create(16, nullptr);
  }
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

MatchState& ThreadMatchState() {
  thread_local MatchState state;
  return state;
}

}  // namespace

namespace {

// The class members PCRE2's Unicode 14.0 tables lack for general category
// `name` ("L", "Lo", "N", ...), as "\x{lo}-\x{hi}..."; empty for other names.
std::string MembersSince14(std::string_view name) {
  const bool category = (name.size() == 1 || name.size() == 2) && name[0] >= 'A' &&
                        name[0] <= 'Z' && (name.size() == 1 || (name[1] >= 'a' && name[1] <= 'z'));
  std::string out;
  if (!category) return out;
  for (const AssignedRange* r = AssignedSinceUnicode14Begin(); r != AssignedSinceUnicode14End();
       ++r) {
    if (r->category[0] != name[0] || (name.size() == 2 && r->category[1] != name[1])) continue;
    absl::StrAppendFormat(&out, "\\x{%X}-\\x{%X}", static_cast<uint32_t>(r->lo),
                          static_cast<uint32_t>(r->hi));
  }
  return out;
}

}  // namespace

std::string OnigCompatPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 'p' || n == 'P') {
        // \p{X} or \pX: Oniguruma's Unicode is newer than PCRE2's, so add
        // the members assigned since (see gen_unicode_since_14.py). A \P{X}
        // inside a class has no such spelling and is left as it is.
        size_t end = i + 2;  // one past the property
        std::string_view name;
        if (end < p.size() && p[end] == '{') {
          const size_t close = p.find('}', end);
          if (close != std::string_view::npos) {
            name = p.substr(end + 1, close - end - 1);
            end = close + 1;
          }
        } else if (end < p.size()) {
          name = p.substr(end, 1);
          end += 1;
        }
        const std::string extra = MembersSince14(name);
        const std::string as_written(p.substr(i, end - i));
        if (extra.empty() || (n == 'P' && in_class)) {
          out += as_written;
        } else if (n == 'p') {
          out += in_class ? absl::StrCat(as_written, extra)
                          : absl::StrCat("[", as_written, extra, "]");
        } else {
          out += absl::StrCat("[^\\p", as_written.substr(2), extra, "]");
        }
        i = end - 1;
        continue;
      }
      if (n == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (n == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Create(
    const std::string& pattern) {
  const std::string compat = OnigCompatPattern(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compat.data()), compat.size(),
                    PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return absl::InvalidArgumentError(
        absl::StrCat("bad regex '", pattern, "' at offset ", offset, ": ",
                     reinterpret_cast<char*>(msg)));
  }
  pcre2_jit_compile(
      code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  auto re = std::unique_ptr<Regex>(new Regex());
  re->pattern_ = pattern;
  re->code_ = code;
  return re;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text,
                    std::vector<std::pair<size_t, size_t>>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& st = ThreadMatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                         st.data, st.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // JIT stack exhausted or similar: retry with the interpreter.
      rc = pcre2_match(code, subject, text.size(), start,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.data, st.context);
    }
    if (rc < 0) break;  // no further match (or an unrecoverable error)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t b = ov[0], e = ov[1];
    if (e <= b) {  // empty match: step over one character
      if (b >= text.size()) break;
      start = b + CharLenAt(text, b);
      continue;
    }
    out->emplace_back(b, e);
    start = e;
  }
}

}  // namespace tandem::tok
