#include "coordinator/service/frontend_backend.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace tandem::coord {
namespace {

absl::Status Unsupported(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is not supported by this server"));
}

frontend::FinishReason ToFrontend(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return frontend::FinishReason::kStop;
    case FinishReason::kLength: return frontend::FinishReason::kLength;
    default: return frontend::FinishReason::kAbort;  // abort and error (status says which)
  }
}

}  // namespace

absl::Status FrontendBackend::Submit(frontend::GenerationRequest request,
                                     frontend::EventCallback on_event) {
  const frontend::SamplingOptions& s = request.sampling;
  if (s.min_p > 0) return Unsupported("min_p");
  if (s.presence_penalty != 0 || s.frequency_penalty != 0 || s.repetition_penalty != 1) {
    return Unsupported("presence/frequency/repetition penalties");
  }
  if (s.prompt_logprobs >= 0) return Unsupported("echo with prompt log-probs");
  GenerationRequest r;
  r.prompt_ids = std::move(request.prompt_ids);
  r.arrival_time = request.arrival_time;
  GenerationParams& p = r.params;
  p.max_tokens = s.max_tokens;
  p.min_tokens = s.min_tokens;
  p.temperature = s.temperature;
  p.top_p = s.top_p;
  p.top_k = s.top_k;
  p.seed = s.seed;
  p.stop = s.stop;
  p.include_stop_str_in_output = s.include_stop_str_in_output;
  p.stop_token_ids = s.stop_token_ids;
  p.ignore_eos = s.ignore_eos;
  p.skip_special_tokens = s.skip_special_tokens;
  p.logit_bias = s.logit_bias;
  p.top_logprobs = s.logprobs;
  p.json_object = s.json_object;
  p.json_schema = s.json_schema;

  const std::string key = request.request_id;
  auto callback = [this, key, on_event = std::move(on_event)](const GenerationEvent& e) {
    frontend::GenerationEvent f;
    f.token_ids = e.token_ids;
    for (const auto& lp : e.logprobs) f.logprobs.push_back({lp.id, lp.logprob, lp.top});
    f.text = e.text;
    f.finished = e.finished;
    f.finish_reason = ToFrontend(e.finish_reason);
    f.stop_string = e.stop_string;
    f.stop_token_id = e.stop_token_id;
    f.status = e.status;
    f.queue_time_s = e.queue_time_s;
    if (e.finished) f.cached_prompt_tokens = e.usage.cached_prompt_tokens;
    if (e.finished) {
      absl::MutexLock l(&mu_);
      ids_.erase(key);
    }
    return on_event(f);
  };
  absl::StatusOr<int64_t> id = driver_->Submit(std::move(r), std::move(callback));
  if (!id.ok()) return id.status();
  bool cancel = false;
  {
    absl::MutexLock l(&mu_);
    cancel = cancelled_early_.erase(key) > 0;
    if (!cancel) ids_[key] = *id;
  }
  if (cancel) driver_->Abort(*id).IgnoreError();
  return absl::OkStatus();
}

void FrontendBackend::Cancel(const std::string& request_id) {
  int64_t id = -1;
  {
    absl::MutexLock l(&mu_);
    auto it = ids_.find(request_id);
    if (it == ids_.end()) {
      cancelled_early_.insert(request_id);  // Submit may not have returned yet
      return;
    }
    id = it->second;
    ids_.erase(it);
  }
  driver_->Abort(id).IgnoreError();
}

}  // namespace tandem::coord
