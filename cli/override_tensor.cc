#include "cli/override_tensor.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tandem::cli {
namespace {

struct Rule {
  std::string text;  // as given, for errors
  std::regex pattern;
  bool cpu = false;
  bool used = false;
};

// CPU, or a device buffer of llama.cpp's names (CUDA0, ...) or GPU.
absl::StatusOr<bool> IsCpuBuffer(const std::string& buffer, const std::string& rule) {
  if (buffer == "CPU") return true;
  if (buffer == "GPU" || (buffer.rfind("CUDA", 0) == 0 && buffer.size() > 4 &&
                          buffer.find_first_not_of("0123456789", 4) == std::string::npos)) {
    return false;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--override-tensor ", rule, ": the buffer must be CPU or a GPU (CUDA0, CUDA1, ..., GPU)"));
}

absl::StatusOr<std::vector<Rule>> ParseRules(const std::vector<std::string>& values) {
  std::vector<Rule> rules;
  for (const std::string& value : values) {
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      const std::string text(part);
      const size_t eq = text.rfind('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--override-tensor ", text, ": expected REGEX=BUFFER"));
      }
      Rule r;
      r.text = text;
      absl::StatusOr<bool> cpu = IsCpuBuffer(text.substr(eq + 1), text);
      if (!cpu.ok()) return cpu.status();
      r.cpu = *cpu;
      // std::regex reports a bad pattern by throwing: caught here, so that
      // it is an error message and not an abort.
      try {
        r.pattern = std::regex(text.substr(0, eq), std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--override-tensor ", text, ": not a regular expression (", e.what(), ")"));
      }
      rules.push_back(std::move(r));
    }
  }
  return rules;
}

}  // namespace

absl::StatusOr<std::string> CpuExpertsFromOverrides(const std::vector<std::string>& values,
                                                    const ModelConfig& c) {
  absl::StatusOr<std::vector<Rule>> parsed = ParseRules(values);
  if (!parsed.ok()) return parsed.status();
  std::vector<Rule>& rules = *parsed;
  if (!c.is_moe()) {
    return absl::InvalidArgumentError(
        "--override-tensor: the model has no routed experts (a dense model), and Tandem places "
        "only routed-expert tensors this way");
  }
  std::vector<int64_t> counts(static_cast<size_t>(c.num_layers), 0);
  bool any = false, all = true;  // of the MoE layers
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    int cpu = 0;
    for (const char* kind : {"gate", "up", "down"}) {
      const std::string name = absl::StrCat("blk.", l, ".ffn_", kind, "_exps.weight");
      for (Rule& r : rules) {
        bool match = false;
        try {
          match = std::regex_search(name, r.pattern);
        } catch (const std::regex_error& e) {  // e.g. too complex for std::regex
          return absl::InvalidArgumentError(
              absl::StrCat("--override-tensor ", r.text, ": ", e.what()));
        }
        if (!match) continue;
        r.used = true;
        cpu += r.cpu ? 1 : 0;
        break;
      }
    }
    if (cpu != 0 && cpu != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("--override-tensor: layer ", l, "'s gate, up and down expert tensors (blk.",
                       l, ".ffn_{gate,up,down}_exps.weight) must go to one place; the rules send ",
                       cpu, " of them to the CPU"));
    }
    if (cpu == 3) {
      counts[static_cast<size_t>(l)] = c.num_experts;
      any = true;
    } else {
      all = false;
    }
  }
  for (const Rule& r : rules) {
    if (!r.used) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--override-tensor ", r.text,
          ": decides no routed-expert tensor of the model (blk.N.ffn_{gate,up,down}_exps.weight, "
          "N < ",
          c.num_layers,
          "; an earlier rule takes the first match); Tandem places only "
          "those with this flag"));
    }
  }
  if (!any) return std::string("none");
  return all ? std::string("all") : absl::StrJoin(counts, ",");
}

}  // namespace tandem::cli
