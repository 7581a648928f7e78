// Runs one StepPlan from the coordinator on the engine: frees finished
// sequences, runs the ragged batch, samples the sequences that ask for it
// (rank 0 samples) and returns ids, log-probs and timings as a StepResult.
// The gRPC Worker service is a thin shell around this class.
#ifndef TANDEM_GPU_WORKER_SERVICE_STEP_EXECUTOR_H_
#define TANDEM_GPU_WORKER_SERVICE_STEP_EXECUTOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "cpu_worker/ops/sampling.h"
#include "gpu_worker/engine/engine.h"
#include "proto/worker.pb.h"

namespace tandem {

class StepExecutor {
 public:
  explicit StepExecutor(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}

  // Validates the whole plan before running it; a bad plan changes nothing
  // but the sequences it frees.
  absl::StatusOr<proto::StepResult> Run(const proto::StepPlan& plan);

  Engine& engine() { return *engine_; }

 private:
  absl::Status Validate(const proto::StepPlan& plan) const;
  static bool GreedyOnly(const proto::StepSequence& s);
  void SampleInto(const float* logits, const proto::StepSequence& s,
                  proto::SequenceResult* out);

  std::unique_ptr<Engine> engine_;
  ops::Sampler sampler_{ops::SamplingParams{}};
  std::vector<float> biased_;  // [vocab] logits with the request's logit_bias
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_SERVICE_STEP_EXECUTOR_H_
