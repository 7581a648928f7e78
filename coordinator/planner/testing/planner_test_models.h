// Test-only inputs shared by the planner's tests: the shapes of the models
// the papers ran, written out in code (no file reads), one hardware profile
// several families' tests run on, and loaders for the shipped model configs
// and hardware profiles by name. Families keep the profiles of their own
// paper's testbed in their own fixtures, with each figure's source.
#ifndef TANDEM_COORDINATOR_PLANNER_TESTING_PLANNER_TEST_MODELS_H_
#define TANDEM_COORDINATOR_PLANNER_TESTING_PLANNER_TEST_MODELS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "common/model_config.h"

namespace tandem::planner::testing {

// The keys each published config.json sets (the same files ship as
// coordinator/planner/models/<name>.json; the cost test checks that these
// agree with them).

// Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1, models/mixtral-8x7b.json):
// 32 layers, hidden 4096, expert intermediate 14336, 32 q / 8 kv heads of
// 128, 8 experts top-2, vocab 32000.
ModelConfig Mixtral8x7B();

// Mixtral-8x22B (mistralai/Mixtral-8x22B-v0.1, models/mixtral-8x22b.json):
// 56 layers, hidden 6144, expert intermediate 16384, 48 q / 8 kv heads of
// 128, 8 experts top-2, vocab 32000.
ModelConfig Mixtral8x22B();

// LLaMA-2-7B (meta-llama/Llama-2-7b-hf, models/llama-2-7b.json): 32
// layers, hidden 4096, intermediate 11008, 32 heads of 128 (MHA).
ModelConfig Llama2_7B();

// LLaMA-2-70B (meta-llama/Llama-2-70b-hf, models/llama-2-70b.json): 80
// layers, hidden 8192, intermediate 28672, 64 q / 8 kv heads of 128.
ModelConfig Llama2_70B();

// RTX 3090 + AMD EPYC 7742 over PCIe 4.0 x16: ScheInfer's testbed B, the
// GPU of Klotski's Env 1. The figures of profiles/rtx3090-epyc7742.json
// that the Klotski and HybriMoE tests use, with their sources.
HardwareProfile Rtx3090Epyc7742();

// The shipped model config coordinator/planner/models/<name>.json, parsed.
absl::StatusOr<ModelConfig> ShippedModel(const std::string& name);

// The shipped hardware profile coordinator/planner/profiles/<name>.json.
absl::StatusOr<HardwareProfile> ShippedProfile(const std::string& name);

// The folders those files are in (for tests that walk every file).
std::string ShippedModelsDir();
std::string ShippedProfilesDir();

}  // namespace tandem::planner::testing

#endif  // TANDEM_COORDINATOR_PLANNER_TESTING_PLANNER_TEST_MODELS_H_
