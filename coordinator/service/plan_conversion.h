// Between the scheduler's plans and the Worker protocol: a ScheduledChunk
// becomes a proto::StepSequence (tokens, positions, sampling options and the
// count of tokens generated so far, which seeds the worker's sampler for the
// next token exactly as `tandem generate` seeds it), and a proto::StepResult
// becomes the scheduler's SampledTokens.
#ifndef TANDEM_COORDINATOR_SERVICE_PLAN_CONVERSION_H_
#define TANDEM_COORDINATOR_SERVICE_PLAN_CONVERSION_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/service/generation_types.h"
#include "proto/worker.pb.h"

namespace tandem::coord {

proto::SequenceSampling ToProtoSampling(const GenerationParams& params,
                                        uint64_t seed);

// `generated`: tokens the request has generated so far (the index of the
// token this chunk samples, if it samples). While generated < min_tokens,
// `eos_token_ids` (unless ignore_eos) and the stop token ids get a -1e9
// logit bias.
proto::StepSequence ToStepSequence(const sched::ScheduledChunk& chunk,
                                   const GenerationParams& params,
                                   uint64_t seed, int64_t generated,
                                   absl::Span<const int32_t> eos_token_ids = {});

// The worker's answer to `plan`: one token for every chunk that samples.
// InvalidArgument (naming the sequence) for a result missing, duplicated or
// for a sequence not in the plan. `by_id` (optional) receives each sampled
// sequence's result.
absl::StatusOr<std::vector<sched::SampledToken>> MatchResults(
    const sched::StepPlan& plan, const proto::StepResult& result,
    absl::flat_hash_map<int64_t, const proto::SequenceResult*>* by_id);

// The sampled token's log-prob and its alternatives.
TokenLogprob ToTokenLogprob(const proto::SequenceResult& result);

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_PLAN_CONVERSION_H_
