// The planner's prediction beside `tandem bench`'s measured figures: each
// engine figure (pp, tg, batched decode) predicted by MoE-Lightning's
// performance model at the engine's own placement (the layers the weight
// budget left streamed), on a hardware profile with a GPU. Here rather than
// in the bench library: the planner is the coordinator's, the bench the
// worker's, and only the command links both.
#ifndef TANDEM_CLI_BENCH_PREDICTION_H_
#define TANDEM_CLI_BENCH_PREDICTION_H_

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "gpu_worker/bench/bench_report.h"

namespace tandem::cli {

// The machine as the bench measured it: the device's GPU and link figures
// (from its own profiler) with the CPU figures of the bench's sweeps and
// GEMM peaks, so the prediction and the roofline fractions share their
// inputs.
HardwareProfile BenchMachineProfile(const bench::BenchReport& r, const HardwareProfile& device);

// One PredictedFigure per engine figure of `r`, in the table's order.
// FailedPrecondition when `hw` has no GPU; InvalidArgument when the
// model's config cannot be costed.
absl::StatusOr<bench::PlannerPrediction> PredictBenchFigures(const bench::BenchReport& r,
                                                             const HardwareProfile& hw);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BENCH_PREDICTION_H_
