#include "cli/llama_cpp_short_flags.h"

namespace tandem::cli {

void RewriteLlamaCppShortFlags(std::vector<std::string>* args) {
  static const struct {
    const char* short_name;
    const char* long_name;
  } kFlags[] = {{"-ot", "--override-tensor"},
                {"-cmoe", "--cpu-moe"},
                {"-ncmoe", "--n-cpu-moe"},
                {"-ngl", "--n-gpu-layers"}};
  // (A flag's value spelled exactly "-ot" would be rewritten too; no value
  // of Tandem's flags is.)
  for (std::string& a : *args) {
    for (const auto& f : kFlags) {
      const std::string s = f.short_name;
      if (a == s) {
        a = f.long_name;
      } else if (a.rfind(s + "=", 0) == 0) {
        a = std::string(f.long_name) + a.substr(s.size());
      }
    }
  }
}

}  // namespace tandem::cli
