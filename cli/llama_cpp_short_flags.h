// llama.cpp's multi-letter single-dash flags that Tandem accepts under its
// long names: -ot (--override-tensor), -cmoe (--cpu-moe), -ncmoe
// (--n-cpu-moe), -ngl (--n-gpu-layers). CLI11 takes no multi-letter name after one dash, so the
// arguments are rewritten before parsing.
#ifndef TANDEM_CLI_LLAMA_CPP_SHORT_FLAGS_H_
#define TANDEM_CLI_LLAMA_CPP_SHORT_FLAGS_H_

#include <string>
#include <vector>

namespace tandem::cli {

// Rewrites each such flag in `args` (the arguments after the program name)
// to its long name, also in the -ot=VALUE form.
void RewriteLlamaCppShortFlags(std::vector<std::string>* args);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_LLAMA_CPP_SHORT_FLAGS_H_
