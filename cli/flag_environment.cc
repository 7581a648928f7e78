#include "cli/flag_environment.h"

#include <cctype>

extern char** environ;

namespace tandem::cli {

std::string FlagEnvironmentName(std::string_view long_name) {
  std::string out(kFlagEnvironmentPrefix);
  for (char c : long_name) {
    out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

void BindFlagsToEnvironment(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt == app.get_help_ptr() || opt == app.get_help_all_ptr() ||
        opt == app.get_version_ptr() || opt->get_lnames().empty() ||
        opt->get_lnames().front() == "config") {  // --config is read before parsing
      continue;
    }
    opt->envname(FlagEnvironmentName(opt->get_lnames().front()));
  }
  for (CLI::App* sub : app.get_subcommands({})) BindFlagsToEnvironment(*sub);
}

std::vector<std::string> EnvironmentForChildren() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.substr(0, kFlagEnvironmentPrefix.size()) != kFlagEnvironmentPrefix) out.emplace_back(v);
  }
  return out;
}

}  // namespace tandem::cli
