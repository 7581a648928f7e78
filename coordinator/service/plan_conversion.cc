#include "coordinator/service/plan_conversion.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tandem::coord {

proto::SequenceSampling ToProtoSampling(const GenerationParams& params,
                                        uint64_t seed) {
  proto::SequenceSampling s;
  s.set_temperature(params.temperature);
  s.set_top_p(params.top_p);
  s.set_top_k(std::max<int64_t>(0, params.top_k));
  s.set_seed(seed);
  s.set_top_logprobs(params.top_logprobs);
  for (const auto& [id, bias] : params.logit_bias) {
    (*s.mutable_logit_bias())[id] = bias;
  }
  return s;
}

proto::StepSequence ToStepSequence(const sched::ScheduledChunk& chunk,
                                   const GenerationParams& params,
                                   uint64_t seed, int64_t generated,
                                   absl::Span<const int32_t> eos_token_ids) {
  proto::StepSequence s;
  s.set_seq_id(chunk.request_id);
  s.mutable_tokens()->Add(chunk.tokens.begin(), chunk.tokens.end());
  s.set_start_pos(chunk.start_pos);
  s.set_sample(chunk.sample);
  s.set_cpu_attention(chunk.pool == sched::KvPool::kCpu);
  s.mutable_block_table()->Add(chunk.block_table.begin(),
                               chunk.block_table.end());
  s.set_shared_prefix_tokens(chunk.shared_prefix_tokens);
  s.set_generated(generated);
  *s.mutable_sampling() = ToProtoSampling(params, seed);
  if (chunk.sample && generated < params.min_tokens) {
    constexpr float kForbidden = -1e9f;  // finite: the worker checks
    auto& bias = *s.mutable_sampling()->mutable_logit_bias();
    if (!params.ignore_eos) {
      for (int32_t id : eos_token_ids) bias[id] = kForbidden;
    }
    for (int32_t id : params.stop_token_ids) bias[id] = kForbidden;
  }
  return s;
}

absl::StatusOr<std::vector<sched::SampledToken>> MatchResults(
    const sched::StepPlan& plan, const proto::StepResult& result,
    absl::flat_hash_map<int64_t, const proto::SequenceResult*>* by_id) {
  absl::flat_hash_set<int64_t> sampling;
  absl::flat_hash_set<int64_t> in_plan;
  for (const sched::ScheduledChunk& c : plan.chunks) {
    in_plan.insert(c.request_id);
    if (c.sample) sampling.insert(c.request_id);
  }
  absl::flat_hash_map<int64_t, const proto::SequenceResult*> found;
  for (const proto::SequenceResult& r : result.results()) {
    if (!in_plan.contains(r.seq_id())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", plan.step_id, ": result for sequence ", r.seq_id(),
          " which is not in the plan"));
    }
    if (!sampling.contains(r.seq_id())) continue;  // a partial prefill
    if (!found.emplace(r.seq_id(), &r).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", plan.step_id, ": two results for sequence ", r.seq_id()));
    }
  }
  std::vector<sched::SampledToken> tokens;
  tokens.reserve(sampling.size());
  for (const sched::ScheduledChunk& c : plan.chunks) {
    if (!c.sample) continue;
    auto it = found.find(c.request_id);
    if (it == found.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", plan.step_id, ": no token for sequence ",
                       c.request_id));
    }
    tokens.push_back({c.request_id, it->second->token()});
  }
  if (by_id != nullptr) *by_id = std::move(found);
  return tokens;
}

TokenLogprob ToTokenLogprob(const proto::SequenceResult& result) {
  TokenLogprob t;
  t.id = result.token();
  t.logprob = result.logprob();
  const int n = std::min(result.top_ids_size(), result.top_logprobs_size());
  t.top.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    t.top.emplace_back(result.top_ids(i), result.top_logprobs(i));
  }
  return t;
}

}  // namespace tandem::coord
