// A fixed little workload for tensor-parallel tests, run the same way by a
// single-rank engine and by every rank of a group (threads of a test, or
// engine_tp_rank processes): two sequences prefilled together (one asking
// for every position's logits), then greedy decode steps of both, each
// token chosen from the engine's own logits.
#ifndef TANDEM_GPU_WORKER_ENGINE_TESTING_TP_SCRIPT_H_
#define TANDEM_GPU_WORKER_ENGINE_TESTING_TP_SCRIPT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu_worker/engine/all_reduce.h"
#include "gpu_worker/engine/engine.h"

namespace tandem::testing {

struct TpScriptResult {
  std::vector<float> logits;   // every step's logits, concatenated
  std::vector<int32_t> tokens;  // the greedy tokens chosen, in order
};

// Opens the checkpoint at `model` and builds an engine for the script (null
// `ar`: a single rank), the FFN weights of `streamed` layers streamed
// through the weight pager.
absl::StatusOr<std::unique_ptr<Engine>> MakeTpEngine(const std::string& model, AllReduce* ar,
                                                     std::vector<int64_t> streamed = {});

// Runs the script on `engine`.
absl::StatusOr<TpScriptResult> RunTpScript(Engine& engine);

// Writes / reads a result as a flat binary file (for rank processes).
absl::Status WriteTpResult(const TpScriptResult& r, const std::string& path);
absl::StatusOr<TpScriptResult> ReadTpResult(const std::string& path);

}  // namespace tandem::testing

#endif  // TANDEM_GPU_WORKER_ENGINE_TESTING_TP_SCRIPT_H_
