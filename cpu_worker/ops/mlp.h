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
  // Per OpenMP thread, for calls that RunMlps shares out whole.
  std::vector<std::vector<float>> thread_gate, thread_up;
};

void RunMlp(const MlpWeights& m, const float* x, int64_t rows, float* out, MlpScratch& scratch);

// One MLP's operands, for RunMlps.
struct MlpCall {
  const MlpWeights* w;
  const float* x;  // [rows, hidden]
  int64_t rows;
  float* out;  // [rows, hidden]
};

// RunMlp for each call (the same bits: every kernel's row results are the
// same on one thread or several). A MoE layer's decode experts are a few
// matrices of a few MB each, and a parallel region for each costs both
// threads its start and end. So where the calls are of a few rows and
// share out evenly over the threads (internal::ShareMlpsOut), each thread
// runs whole MLPs on its own, one region for all; otherwise the gates and
// ups of all of them run as one LinearGroup, then the downs as another (on
// packed Q8_0 weights two regions, not three per MLP), kGroupMaxRows rows
// at a time.
void RunMlps(const MlpCall* calls, int64_t count, MlpScratch& scratch);

namespace internal {
// Whether RunMlps shares out whole MLPs of these costs (a call's weight
// bytes, scaled up by its rows) over `threads` threads: if the longest
// processing time first assignment of them loads no thread more than 10 %
// above the mean.
bool ShareMlpsOut(const std::vector<double>& costs, int threads);
// Calls of more rows than this are split across the threads.
inline constexpr int64_t kShareMlpMaxRows = 16;
// RunMlps groups calls of up to this many rows in all (a larger call runs
// alone): large calls fill a region on their own.
inline constexpr int64_t kGroupMaxRows = 64;
}  // namespace internal

// Loads blk.<layer>.ffn_{gate,up,down}<suffix> (suffix ".weight" for dense
// layers, "_shexp.weight" for the shared expert).
absl::StatusOr<MlpWeights> LoadMlp(const Checkpoint& ckpt, int64_t layer,
                                   const std::string& suffix, ComputeType prefer);
// Loads routed expert `expert` of `layer`.
absl::StatusOr<MlpWeights> LoadExpertMlp(const Checkpoint& ckpt, int64_t layer, int64_t expert,
                                         ComputeType prefer);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_MLP_H_
