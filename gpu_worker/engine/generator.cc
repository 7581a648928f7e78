#include "gpu_worker/engine/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::StatusOr<GenerationResult> Generate(
    Engine& engine, int64_t seq_id, const std::vector<int32_t>& prompt,
    const GenerationParams& params, const std::function<bool(const GeneratedToken&)>& on_token) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 0, got ", params.max_tokens));
  }
  if (params.prefill_chunk <= 0) return absl::InvalidArgumentError("prefill_chunk must be > 0");
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= engine.max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", n_prompt,
                                                   " tokens; the context holds ",
                                                   engine.max_context()));
  }
  engine.FreeSequence(seq_id);
  absl::Cleanup free_kv = [&] { engine.FreeSequence(seq_id); };

  GenerationResult result;
  result.prompt_tokens = n_prompt;
  const int64_t vocab = engine.config().vocab_size;

  // Greedy decoding needs only each step's argmax and its log-prob, which a
  // device with its own memory picks on the device (SequenceChunk::
  // greedy_only); the earlier prefill chunks' logits are not needed at all.
  const bool greedy = params.sampling.temperature <= 0.0f || params.sampling.top_k == 1;
  // The step's last row: its logits, or the token picked on the device.
  std::vector<float> last_logits;
  int32_t picked = -1;
  float picked_logprob = 0;
  auto keep = [&](const StepResult& r) {
    if (!r.greedy_ids.empty()) {
      picked = r.greedy_ids[0];
      picked_logprob = r.greedy_logprobs[0];
    } else {
      picked = -1;
      last_logits.assign(r.Row(0), r.Row(0) + vocab);
    }
  };

  // Chunked prefill: the last chunk's final logits give the first token.
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t pos = 0; pos < n_prompt; pos += params.prefill_chunk) {
    const int64_t n = std::min(params.prefill_chunk, n_prompt - pos);
    SequenceChunk chunk;
    chunk.seq_id = seq_id;
    chunk.start_pos = pos;
    chunk.tokens.assign(prompt.begin() + pos, prompt.begin() + pos + n);
    chunk.cpu_attention = params.cpu_attention;
    chunk.greedy_only = greedy || pos + n < n_prompt;
    TANDEM_ASSIGN_OR_RETURN(StepResult r, engine.Step({chunk}));
    if (pos + n == n_prompt) keep(r);
  }
  result.prefill_seconds = SecondsSince(t0);

  t0 = std::chrono::steady_clock::now();
  ops::Sampler sampler(params.sampling);
  result.finish_reason = "length";
  int64_t pos = n_prompt;
  for (int64_t i = 0; i < params.max_tokens; ++i) {
    GeneratedToken tok;
    if (picked >= 0) {
      tok.id = picked;  // what the greedy sampler takes from the logits
      tok.logprob = picked_logprob;
    } else {
      sampler.Reseed(ops::TokenSeed(params.sampling.seed, i));
      tok.id = sampler.Sample(last_logits.data(), vocab);
      tok.logprob = ops::LogProb(last_logits.data(), vocab, tok.id);
    }
    if (!params.ignore_eos &&
        std::find(params.eos_ids.begin(), params.eos_ids.end(), tok.id) != params.eos_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(tok);
    if (on_token && !on_token(tok)) {
      result.finish_reason = "stop";
      break;
    }
    // Nothing more to compute after the last token or at the context limit.
    if (i + 1 == params.max_tokens || pos + 1 >= engine.max_context()) break;
    SequenceChunk chunk;
    chunk.seq_id = seq_id;
    chunk.start_pos = pos;
    chunk.tokens = {tok.id};
    chunk.cpu_attention = params.cpu_attention;
    chunk.greedy_only = greedy;
    TANDEM_ASSIGN_OR_RETURN(StepResult r, engine.Step({chunk}));
    keep(r);
    ++pos;
  }
  result.decode_seconds = SecondsSince(t0);
  return result;
}

}  // namespace tandem
