#include "gpu_worker/service/step_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"

namespace tandem {

absl::Status StepExecutor::Validate(const proto::StepPlan& plan) const {
  const int64_t vocab = engine_->config().vocab_size;
  for (const proto::StepSequence& s : plan.sequences()) {
    const auto& sp = s.sampling();
    if (!(sp.temperature() >= 0) || !std::isfinite(sp.temperature())) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s.seq_id(), ": temperature must be >= 0"));
    }
    if (!(sp.top_p() >= 0 && sp.top_p() <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s.seq_id(), ": top_p must be in [0, 1]"));
    }
    if (sp.top_k() < 0 || sp.top_logprobs() > 20 || s.generated() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s.seq_id(), ": top_k, top_logprobs or generated out of range"));
    }
    for (const auto& [id, bias] : sp.logit_bias()) {
      if (id < 0 || id >= vocab || !std::isfinite(bias)) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", s.seq_id(), ": logit_bias for token ", id, " is invalid"));
      }
    }
    const std::string& allowed = sp.allowed_tokens();
    if (!allowed.empty()) {
      const bool sized = static_cast<int64_t>(allowed.size()) == (vocab + 7) / 8;
      bool any = false;
      for (int64_t i = 0; sized && !any && i < vocab; ++i) {
        any = (static_cast<uint8_t>(allowed[static_cast<size_t>(i / 8)]) >> (i % 8)) & 1;
      }
      if (!sized || !any) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", s.seq_id(), ": allowed_tokens must be ", (vocab + 7) / 8,
            " bytes with a bit set, got ", allowed.size(), any ? "" : " with none set"));
      }
    }
  }
  return absl::OkStatus();
}

// True when SampleInto would need only the argmax of the chunk's last row
// and its log-prob: greedy sampling with no logit bias and no top
// log-probs, or a chunk that samples nothing (a prompt's earlier chunk) and
// wants no prompt log-probs.
bool StepExecutor::GreedyOnly(const proto::StepSequence& s) {
  if (s.prompt_logprobs()) return false;
  if (!s.sample()) return true;
  const auto& sp = s.sampling();
  return (sp.temperature() <= 0.0f || sp.top_k() == 1) && sp.logit_bias().empty() &&
         sp.allowed_tokens().empty() && sp.top_logprobs() == 0;
}

void StepExecutor::SampleInto(const float* logits, const proto::StepSequence& s,
                              proto::SequenceResult* out) {
  const int64_t vocab = engine_->config().vocab_size;
  const auto& sp = s.sampling();
  const float* l = logits;
  if (!sp.logit_bias().empty() || !sp.allowed_tokens().empty()) {
    biased_.assign(logits, logits + vocab);
    for (const auto& [id, bias] : sp.logit_bias()) biased_[static_cast<size_t>(id)] += bias;
    // Tokens outside the constraint get -inf: no temperature, top-k or top-p
    // brings them back (Validate saw that one is allowed).
    const std::string& allowed = sp.allowed_tokens();
    for (int64_t i = 0; !allowed.empty() && i < vocab; ++i) {
      if (!((static_cast<uint8_t>(allowed[static_cast<size_t>(i / 8)]) >> (i % 8)) & 1)) {
        biased_[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
      }
    }
    l = biased_.data();
  }
  ops::SamplingParams p;
  p.temperature = sp.temperature();
  p.top_k = sp.top_k();
  p.top_p = sp.top_p() > 0 ? sp.top_p() : 1.0f;
  p.seed = sp.seed();
  sampler_.Reset(p);
  sampler_.Reseed(ops::TokenSeed(sp.seed(), s.generated()));
  const int32_t token = sampler_.Sample(l, vocab);
  out->set_token(token);
  // Log-probs are of the model's distribution (before bias and temperature),
  // as the OpenAI API reports them.
  out->set_logprob(ops::LogProb(logits, vocab, token));
  if (sp.top_logprobs() > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    const auto k = static_cast<size_t>(std::min<int64_t>(sp.top_logprobs(), vocab));
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    for (size_t i = 0; i < k; ++i) {
      out->add_top_ids(idx[i]);
      out->add_top_logprobs(ops::LogProb(logits, vocab, idx[i]));
    }
  }
}

absl::StatusOr<proto::StepResult> StepExecutor::Run(const proto::StepPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t id : plan.free_seq_ids()) engine_->FreeSequence(id);
  proto::StepResult result;
  result.set_step(plan.step());
  if (plan.sequences().empty()) return result;
  TANDEM_RETURN_IF_ERROR(Validate(plan));
  if (plan.has_prefill_gpu_tokens()) {
    TANDEM_RETURN_IF_ERROR(engine_->SetPrefillGpuTokens(plan.prefill_gpu_tokens()));
  }

  std::vector<SequenceChunk> batch;
  batch.reserve(static_cast<size_t>(plan.sequences_size()));
  for (const proto::StepSequence& s : plan.sequences()) {
    SequenceChunk c;
    c.seq_id = s.seq_id();
    c.tokens.assign(s.tokens().begin(), s.tokens().end());
    c.start_pos = s.start_pos();
    c.all_logits = s.prompt_logprobs();
    c.greedy_only = GreedyOnly(s);
    c.cpu_attention = s.cpu_attention();
    if (!s.cpu_attention()) c.block_table.assign(s.block_table().begin(), s.block_table().end());
    c.shared_prefix_tokens = s.shared_prefix_tokens();
    batch.push_back(std::move(c));
  }
  TANDEM_ASSIGN_OR_RETURN(
      StepResult r,
      engine_->Step(batch, absl::MakeConstSpan(plan.micro_batch_sizes().data(),
                                               plan.micro_batch_sizes().size())));

  for (size_t i = 0; i < batch.size(); ++i) {
    const proto::StepSequence& s = plan.sequences(static_cast<int>(i));
    proto::SequenceResult* out = result.add_results();
    out->set_seq_id(s.seq_id());
    if (s.prompt_logprobs()) {
      // Log-prob of token j+1 given the prefix, for every token of the chunk
      // but the last (whose successor is not known yet).
      for (int64_t j = 0; j + 1 < r.num_rows[i]; ++j) {
        out->add_prompt_logprobs(ops::LogProb(r.Row(i, j), r.vocab, batch[i].tokens[j + 1]));
      }
    }
    if (!s.sample()) continue;
    if (!r.greedy_ids.empty()) {
      // Picked on the device: GreedyOnly(s) held, so this is SampleInto's
      // token and log-prob without the logits.
      out->set_token(r.greedy_ids[i]);
      out->set_logprob(r.greedy_logprobs[i]);
    } else {
      SampleInto(r.Row(i), s, out);
    }
  }
  result.set_prefill_gpu_rows(r.prefill_gpu_rows);
  if (const ExpertCache* cache = engine_->expert_cache(); cache != nullptr) {
    const LayerResidencyStats t = cache->residency().Stats().total;
    proto::ExpertCacheCounters* c = result.mutable_expert_cache();
    c->set_activations(t.activations);
    c->set_hits(t.hits);
    c->set_misses(t.misses);
    c->set_loads(t.loads);
    c->set_admitted(t.admitted);
    c->set_evictions(t.evictions);
    c->set_prefetch_issued(t.prefetch_issued);
    c->set_prefetch_used(t.prefetch_used);
    c->set_prefetch_wasted(t.prefetch_wasted);
    c->set_gpu_computed(t.gpu_computed);
    c->set_cpu_computed(t.cpu_computed);
  }
  result.set_step_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return result;
}

}  // namespace tandem
