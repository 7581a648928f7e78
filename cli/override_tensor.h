// llama.cpp's `--override-tensor` / `-ot "REGEX=BUFFER[,REGEX=BUFFER...]"`
// for the placement Tandem makes per tensor: routed experts on the CPU.
// llama-server users write, e.g.,
//
//   -ot "exps=CPU"                                 every routed expert
//   -ot "blk\.(1[0-9]|2[0-9])\.ffn_.*_exps=CPU"     those of layers 10-29
//   -ot "blk\.3\.ffn=CUDA0,exps=CPU"               all but layer 3's
//
// Each rule's REGEX is searched (std::regex ECMAScript, as llama.cpp does)
// in each layer's GGUF expert tensor names, blk.N.ffn_{gate,up,down}_exps.weight,
// whatever format the model is in; the first rule that matches a tensor
// decides where it goes: CPU (the cpu_worker computes it), or a device
// (CUDA0, CUDA1, ..., GPU: the gpu_worker). A layer's three expert tensors
// must go to one place, and a rule that matches no expert tensor of the
// model is an error, since every other tensor stays where Tandem's own
// flags put it.
#ifndef TANDEM_CLI_OVERRIDE_TENSOR_H_
#define TANDEM_CLI_OVERRIDE_TENSOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"

namespace tandem::cli {

// The --cpu-experts placement the rules make: "none", or one count per
// layer ("8,8,0,...": all of a layer's experts or none). `rules` are the
// flag's values, each one or more comma-separated REGEX=BUFFER.
absl::StatusOr<std::string> CpuExpertsFromOverrides(const std::vector<std::string>& rules,
                                                    const ModelConfig& config);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_OVERRIDE_TENSOR_H_
