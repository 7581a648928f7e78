#include "cli/flag_config_file.h"

#include <stdlib.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/flag_environment.h"

namespace tandem::cli {
namespace {

constexpr char kConfigFlag[] = "--config";

// (Debian's abseil has a string_view of its own, so these take std's.)
std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r'))
    v.remove_suffix(1);
  return v;
}

std::string Lower(std::string_view v) {
  std::string out(v);
  for (char& c : out) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

absl::Status LineError(const std::string& file, int line, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("--config ", file, ": line ", line, ": ", std::string(what)));
}

// The value after "key:", unquoted and without a trailing comment; YAML's
// booleans as true/false. Errors for what a flag cannot take.
absl::StatusOr<std::string> ScalarValue(std::string_view v, const std::string& file, int line) {
  v = Trim(v);
  if (v.empty() || v[0] == '#') return LineError(file, line, "the key has no value");
  if (v[0] == '"' || v[0] == '\'') {
    const char q = v[0];
    std::string out;
    size_t i = 1;
    for (; i < v.size() && v[i] != q; ++i) {
      if (q == '"' && v[i] == '\\' && i + 1 < v.size()) {
        const char e = v[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        out += v[i];
      }
    }
    if (i == v.size()) return LineError(file, line, "the quoted value is not closed");
    std::string_view rest = Trim(v.substr(i + 1));
    if (!rest.empty() && rest[0] != '#') {
      return LineError(file, line, "text after the quoted value");
    }
    return out;
  }
  if (v[0] == '[' || v[0] == '{' || v[0] == '&' || v[0] == '*' || v[0] == '|' || v[0] == '>') {
    return LineError(file, line, "lists, mappings, anchors and block texts are not flag values");
  }
  // An unquoted value ends at " #".
  if (size_t c = v.find(" #"); c != std::string_view::npos) v = v.substr(0, c);
  v = Trim(v);
  const std::string lower = Lower(v);
  if (lower == "true" || lower == "yes" || lower == "on") return std::string("true");
  if (lower == "false" || lower == "no" || lower == "off") return std::string("false");
  if (lower == "null" || lower == "~") return LineError(file, line, "the key has no value");
  return std::string(v);
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseFlagConfig(
    const std::string& text, const std::string& file) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> seen;
  int line_no = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view trimmed = Trim(line);
    if (trimmed.empty() || trimmed[0] == '#' || (line_no == 1 && trimmed == "---")) continue;
    if (line[0] == ' ' || line[0] == '\t') {
      return LineError(file, line_no,
                       "nested values are not flags (keys start at the line's start)");
    }
    if (trimmed.substr(0, 2) == "- " || trimmed == "-") {
      return LineError(file, line_no, "a list item where a 'flag: value' line was expected");
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return LineError(file, line_no, "expected 'flag: value'");
    }
    std::string key(Trim(line.substr(0, colon)));
    if (key.rfind("--", 0) == 0) key.erase(0, 2);
    for (char& c : key) c = c == '_' ? '-' : c;
    if (key.empty()) return LineError(file, line_no, "a value without a key");
    absl::StatusOr<std::string> value = ScalarValue(line.substr(colon + 1), file, line_no);
    if (!value.ok()) return value.status();
    if (!seen.insert(key).second) {
      return LineError(file, line_no, absl::StrCat("'", key, "' is given twice"));
    }
    out.emplace_back(std::move(key), *std::move(value));
  }
  return out;
}

void AddConfigFlag(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    // Taken out of the arguments before parsing (ApplyConfigFile); here for
    // --help and so that the parser knows the name.
    sub->add_option(kConfigFlag)
        ->type_name("FILE")
        ->description(
            "A YAML file of 'flag: value' lines (vLLM's --config); the command line and "
            "TANDEM_ARG_* variables win");
    AddConfigFlag(*sub);  // and the nested ones (`tandem bench serve`)
  }
}

absl::Status ApplyConfigFile(const CLI::App& app, std::vector<std::string>* args,
                             AppliedConfig* applied) {
  if (args->empty()) return absl::OkStatus();
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands({})) {
    if (s->get_name() == (*args)[0]) sub = s;
  }
  if (sub == nullptr) return absl::OkStatus();  // the parser says what is wrong
  size_t first = 1;
  // A nested subcommand (`tandem bench serve`) owns the flags after it.
  if (args->size() > 1) {
    for (const CLI::App* s : sub->get_subcommands({})) {
      if (s->get_name() == (*args)[1]) {
        sub = s;
        first = 2;
      }
    }
  }
  std::string file;
  int found = 0;
  for (size_t i = first; i < args->size();) {
    const std::string& a = (*args)[i];
    if (a == kConfigFlag && i + 1 < args->size()) {
      file = (*args)[i + 1];
      args->erase(args->begin() + static_cast<std::ptrdiff_t>(i),
                  args->begin() + static_cast<std::ptrdiff_t>(i + 2));
      ++found;
    } else if (absl::StartsWith(a, std::string(kConfigFlag) + "=")) {
      file = a.substr(sizeof(kConfigFlag));
      args->erase(args->begin() + static_cast<std::ptrdiff_t>(i));
      ++found;
    } else if (a == kConfigFlag) {
      return absl::InvalidArgumentError("--config needs a file");
    } else {
      ++i;
    }
  }
  if (found == 0) return absl::OkStatus();
  if (found > 1) return absl::InvalidArgumentError("--config is given more than once");
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--config ", file, ": cannot read the file"));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> items =
      ParseFlagConfig(ss.str(), file);
  if (!items.ok()) return items.status();
  // All checked before any is set: a bad file changes nothing.
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& [key, value] : *items) {
    const CLI::Option* opt = sub->get_option_no_throw("--" + key);
    if (opt == nullptr || key == "config" || key == "help" || opt->get_lnames().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--config ", file, ": '", key, "' is not a flag of tandem ",
                       first == 2 ? (*args)[0] + " " + sub->get_name() : sub->get_name()));
    }
    // A flag's negated name ("no-enable-prefix-caching: true") sets the
    // variable of its first name, so the value is turned round.
    const std::string v = opt->get_expected_max() == 0 ? opt->get_flag_value(key, value) : value;
    env.emplace_back(FlagEnvironmentName(opt->get_lnames().front()), v);
  }
  if (applied != nullptr) applied->file = file;
  for (const auto& [name, value] : env) {
    if (getenv(name.c_str()) != nullptr) continue;  // the environment wins
    setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
    if (applied != nullptr) applied->variables.push_back(name);
  }
  return absl::OkStatus();
}

}  // namespace tandem::cli
