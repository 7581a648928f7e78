// SwiGLU MLPs — dense layers, routed experts, shared experts — on the CPU:
// out[rows, hidden] = down(silu(gate(x)) * up(x)). One pass over each
// matrix for all the rows it serves.
#ifndef TANDEM_CPU_WORKER_OPS_MLP_H_
#define TANDEM_CPU_WORKER_OPS_MLP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "cpu_worker/ops/linear.h"

namespace tandem::ops {

struct MlpWeights {
  LinearWeight gate;  // [ffn, hidden]
  LinearWeight up;    // [ffn, hidden]
  LinearWeight down;  // [hidden, ffn]
};

// Scratch reused across calls (no allocation once grown).
struct MlpScratch {
  std::vector<float> gate;  // [rows, ffn]
  std::vector<float> up;    // [rows, ffn]
};

void RunMlp(const MlpWeights& m, const float* x, int64_t rows, float* out, MlpScratch& scratch);

// One MLP's operands, for RunMlps.
struct MlpCall {
  const MlpWeights* w;
  const float* x;  // [rows, hidden]
  int64_t rows;
  float* out;  // [rows, hidden]
};

// RunMlp for each call (the same bits): the gates and ups of all of them
// as one LinearGroup, then the downs as another, so that a MoE layer's
// experts on packed Q8_0 weights take two parallel regions, not three
// each. The scratch holds every call's rows at once.
void RunMlps(const MlpCall* calls, int64_t count, MlpScratch& scratch);

// Loads blk.<layer>.ffn_{gate,up,down}<suffix> (suffix ".weight" for dense
// layers, "_shexp.weight" for the shared expert).
absl::StatusOr<MlpWeights> LoadMlp(const Checkpoint& ckpt, int64_t layer,
                                   const std::string& suffix, ComputeType prefer);
// Loads routed expert `expert` of `layer`.
absl::StatusOr<MlpWeights> LoadExpertMlp(const Checkpoint& ckpt, int64_t layer, int64_t expert,
                                         ComputeType prefer);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_MLP_H_
