// A generation request as the scheduler sees it: token ids (never text),
// sampling parameters, where its KV lives, and how far the model has got.
//
// Token accounting follows vLLM v1. A request's tokens are its prompt followed
// by its generated tokens; `num_computed_tokens` of them have their KV in the
// cache. Each step the scheduler runs the next tokens [num_computed, ...) of a
// request; when a chunk reaches the last known token the model's logits for it
// are sampled and the new token is appended. A decode is therefore a chunk of
// exactly one token: the previously sampled one. Preemption is by recompute:
// the KV is dropped and num_computed_tokens goes back to 0, while generated
// tokens are kept, so re-admission prefills prompt + generated and sampling
// continues where it stopped.
#ifndef TANDEM_COORDINATOR_SCHEDULER_REQUEST_H_
#define TANDEM_COORDINATOR_SCHEDULER_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tandem::sched {

// The two KV pools. A request's whole KV sits on one of them (Neo: a request
// whose KV is on the CPU runs its decode attention on the CPU).
enum class KvPool : int8_t { kGpu = 0, kCpu = 1 };
inline constexpr int kNumKvPools = 2;
inline constexpr KvPool kAllKvPools[kNumKvPools] = {KvPool::kGpu, KvPool::kCpu};
const char* KvPoolName(KvPool pool);  // "gpu", "cpu"

// kPreempted: waiting again after losing its KV (it sits in the waiting queue).
enum class RequestStatus : int8_t { kWaiting, kRunning, kPreempted, kFinished };
const char* RequestStatusName(RequestStatus status);

// Names match OpenAI's finish_reason where one exists.
enum class FinishReason : int8_t {
  kStop,    // EOS, a stop token id, or a stop string (reported by the frontend)
  kLength,  // max_tokens generated, or the context limit reached
  kAbort,   // the client went away or cancelled
  kError,  // the request cannot be served (prompt too long, KV cache too small)
};
const char* FinishReasonName(FinishReason reason);  // "stop", "length", ...

struct SamplingParams {
  // Tokens to generate at most; nullopt: until a stop condition or the context
  // limit (OpenAI's default when max_tokens is absent).
  std::optional<int64_t> max_tokens;
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = -1;        // <= 0: disabled
  std::optional<uint64_t> seed;
  // Checked by the frontend on detokenized text (StopStringMatcher), which
  // then calls Scheduler::Finish(id, kStop); the scheduler never sees text.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  // Generation stops when one of these is sampled. As in vLLM, ignore_eos
  // disables only the model's EOS ids, not these.
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;

  // InvalidArgument naming the offending field.
  absl::Status Validate() const;
};

class Request {
 public:
  Request(int64_t id, std::vector<int32_t> prompt_token_ids,
          std::shared_ptr<const SamplingParams> sampling, int64_t arrival_seq);

  int64_t id() const { return id_; }
  // Arrival order: smaller arrived earlier. Admission is FCFS in this order.
  int64_t arrival_seq() const { return arrival_seq_; }
  const std::vector<int32_t>& prompt_token_ids() const { return prompt_; }
  const std::vector<int32_t>& output_token_ids() const { return output_; }
  const SamplingParams& sampling() const { return *sampling_; }
  const std::shared_ptr<const SamplingParams>& sampling_ptr() const {
    return sampling_;
  }

  RequestStatus status() const { return status_; }
  std::optional<FinishReason> finish_reason() const { return finish_reason_; }
  bool is_finished() const { return status_ == RequestStatus::kFinished; }

  int64_t num_prompt_tokens() const {
    return static_cast<int64_t>(prompt_.size());
  }
  int64_t num_output_tokens() const {
    return static_cast<int64_t>(output_.size());
  }
  int64_t num_tokens() const {
    return num_prompt_tokens() + num_output_tokens();
  }
  int64_t num_computed_tokens() const { return num_computed_; }
  // Tokens still to run before the next sample (1 for a decode).
  int64_t num_uncomputed_tokens() const { return num_tokens() - num_computed_; }
  // Token at position `pos` of prompt + output.
  int32_t token_at(int64_t pos) const;
  // Tokens [begin, begin + count) of prompt + output.
  std::vector<int32_t> tokens(int64_t begin, int64_t count) const;

  // Pool of its KV while running; nullopt while waiting or finished.
  std::optional<KvPool> kv_pool() const { return kv_pool_; }
  // Admission order among running requests (larger = admitted later); the
  // preemption victim is the running request with the largest value.
  int64_t admit_seq() const { return admit_seq_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Prefix caching: tokens whose KV came from the cache at the latest
  // admission (computed without running), and at the first one (what the
  // client is told: usage.prompt_tokens_details.cached_tokens).
  int64_t num_prefix_hit_tokens() const { return prefix_hit_; }
  int64_t num_cached_prompt_tokens() const { return cached_prompt_; }

  // The stop condition that `token`, just appended, triggers, if any. Order:
  // EOS (unless ignore_eos) and stop_token_ids give kStop, then max_tokens
  // and the context limit give kLength. (vLLM v1 checks length first; we
  // prefer reporting a natural stop when both hold.)
  std::optional<FinishReason> CheckStop(int32_t token,
                                        absl::Span<const int32_t> eos_token_ids,
                                        int64_t max_model_len) const;

  // State changes, made by the Scheduler only.
  // `cached_tokens`: its first tokens whose KV a shared prefix holds.
  void Admit(KvPool pool, int64_t admit_seq, int64_t cached_tokens = 0);
  void AdvanceComputed(int64_t num_tokens);
  void AppendOutputToken(int32_t token);
  void Preempt();  // back to waiting: KV gone, generated tokens kept
  void MarkFinished(FinishReason reason);

 private:
  int64_t id_;
  int64_t arrival_seq_;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> output_;
  std::shared_ptr<const SamplingParams> sampling_;
  RequestStatus status_ = RequestStatus::kWaiting;
  std::optional<FinishReason> finish_reason_;
  int64_t num_computed_ = 0;
  std::optional<KvPool> kv_pool_;
  int64_t admit_seq_ = -1;
  int64_t num_preemptions_ = 0;
  int64_t prefix_hit_ = 0;
  int64_t cached_prompt_ = 0;
};

}  // namespace tandem::sched

#endif  // TANDEM_COORDINATOR_SCHEDULER_REQUEST_H_
