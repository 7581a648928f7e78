#include "cli/flag_sources.h"

#include <stdlib.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/flag_environment.h"

namespace tandem::cli {
namespace {

// Whether `args` give the option itself: --name, --name=..., -s or -s...
bool OnCommandLine(const CLI::Option& opt, const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    for (const std::string& l : opt.get_lnames()) {
      const std::string flag = "--" + l;
      if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
    }
    for (const std::string& s : opt.get_snames()) {
      if (a.rfind("-" + s, 0) == 0 && a.rfind("--", 0) != 0) return true;
    }
  }
  return false;
}

// Whether `message` names `flag` as a whole word (--port, not --port-file).
bool Names(std::string_view message, std::string_view flag) {
  for (size_t at = message.find(flag); at != std::string_view::npos;
       at = message.find(flag, at + 1)) {
    const size_t end = at + flag.size();
    const char next = end < message.size() ? message[end] : ' ';
    const bool word_char =
        (next >= 'a' && next <= 'z') || (next >= '0' && next <= '9') || next == '-' || next == '_';
    if (!word_char) return true;
  }
  return false;
}

std::vector<FlagSource>& Recorded() {
  static std::vector<FlagSource>* sources = new std::vector<FlagSource>();
  return *sources;
}

}  // namespace

std::vector<FlagSource> FindFlagSources(const CLI::App& sub, const std::vector<std::string>& args,
                                        const std::string& config_file,
                                        const std::vector<std::string>& config_variables) {
  std::vector<FlagSource> out;
  for (const CLI::Option* opt : sub.get_options()) {
    const std::string& env = opt->get_envname();
    if (env.empty() || opt->get_lnames().empty()) continue;
    const char* value = getenv(env.c_str());
    if (value == nullptr || OnCommandLine(*opt, args)) continue;
    bool from_config = false;
    for (const std::string& v : config_variables) from_config = from_config || v == env;
    out.push_back(
        {"--" + opt->get_lnames().front(), value, from_config ? "--config " + config_file : env});
  }
  return out;
}

std::string ExplainFlagSources(std::string_view prefix, std::string_view message,
                               const std::vector<FlagSource>& sources) {
  std::string out;
  for (const FlagSource& s : sources) {
    if (!Names(message, s.flag)) continue;
    absl::StrAppend(&out, std::string(prefix), ": ", s.flag, "=", s.value, " was set by ", s.origin,
                    "\n");
  }
  return out;
}

void RecordFlagSources(std::vector<FlagSource> sources) { Recorded() = std::move(sources); }

const std::vector<FlagSource>& RecordedFlagSources() { return Recorded(); }

void PrintCommandError(std::string_view prefix, const absl::Status& status) {
  const std::string message(status.message());
  std::fprintf(stderr, "%s: %s\n%s", std::string(prefix).c_str(), message.c_str(),
               ExplainFlagSources(prefix, message, RecordedFlagSources()).c_str());
}

}  // namespace tandem::cli
