#include "coordinator/frontend/generation_session.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/response_builder.h"
#include "coordinator/frontend/sse_stream.h"

namespace tandem::frontend {
namespace {

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

std::string NewResponseId(Endpoint endpoint) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-",
                      absl::StrFormat("%016x%016x", rng(), rng()));
}

// --- SessionInbox ---

SessionInbox::SessionInbox(size_t num_choices,
                           std::vector<int64_t> prompt_tokens,
                           Clock::time_point arrival, Metrics* metrics)
    : tracks_(num_choices),
      prompt_tokens_(std::move(prompt_tokens)),
      arrival_(arrival),
      metrics_(metrics) {}

void SessionInbox::RecordLocked(size_t choice, const GenerationEvent& e,
                                Clock::time_point now) {
  Track& t = tracks_[choice];
  const int64_t n = static_cast<int64_t>(e.token_ids.size());
  if (metrics_ != nullptr && n > 0) {
    if (!t.first_token_seen) {
      metrics_->ObserveTimeToFirstToken(Seconds(now - arrival_));
      metrics_->AddPromptTokens(prompt_tokens_[choice]);
      if (e.queue_time_s >= 0) metrics_->ObserveQueueTime(e.queue_time_s);
    } else {
      metrics_->ObserveInterTokenLatency(Seconds(now - t.last_token));
    }
    metrics_->AddGenerationTokens(n);
  }
  if (n > 0) {
    t.first_token_seen = true;
    t.last_token = now;
    t.generated += n;
  }
  if (e.finished) {
    t.finished = true;
    if (metrics_ != nullptr) {
      metrics_->ObserveE2eLatency(Seconds(now - arrival_));
      std::string_view reason =
          e.status.ok() ? FinishReasonName(e.finish_reason) : "error";
      metrics_->RequestFinished(reason, prompt_tokens_[choice], t.generated);
    }
  }
}

bool SessionInbox::Push(size_t choice, const GenerationEvent& e) {
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || choice >= tracks_.size() || tracks_[choice].finished)
    return false;
  RecordLocked(choice, e, now);
  events_.emplace_back(choice, e);
  cv_.notify_all();
  return true;
}

std::vector<std::pair<size_t, GenerationEvent>> SessionInbox::Wait(
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty() || closed_; });
  std::vector<std::pair<size_t, GenerationEvent>> out(
      std::make_move_iterator(events_.begin()),
      std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

std::vector<size_t> SessionInbox::Close(bool count_aborts) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> unfinished;
  if (closed_) return unfinished;
  closed_ = true;
  for (size_t i = 0; i < tracks_.size(); ++i) {
    if (!tracks_[i].finished) {
      unfinished.push_back(i);
      tracks_[i].finished = true;
      if (metrics_ != nullptr && count_aborts) {
        metrics_->RequestFinished("abort", prompt_tokens_[i],
                                  tracks_[i].generated);
      }
    }
  }
  cv_.notify_all();
  return unfinished;
}

bool SessionInbox::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

// --- GenerationSession ---

GenerationSession::GenerationSession(ParsedRequest request, ResponseContext ctx,
                                     SessionEnv env,
                                     std::shared_ptr<SessionInbox> inbox)
    : request_(std::move(request)),
      ctx_(std::move(ctx)),
      env_(env),
      inbox_(std::move(inbox)) {}

absl::StatusOr<std::unique_ptr<GenerationSession>> GenerationSession::Start(
    ParsedRequest request, std::string response_id, int64_t created,
    Clock::time_point arrival, SessionEnv env) {
  std::vector<int64_t> prompt_tokens;
  for (const PromptInput& p : request.prompts) {
    prompt_tokens.push_back(static_cast<int64_t>(p.ids.size()));
  }
  auto inbox = std::make_shared<SessionInbox>(
      request.prompts.size(), std::move(prompt_tokens), arrival, env.metrics);
  ResponseContext ctx =
      ResponseContext::From(request, std::move(response_id), created);
  std::vector<GenerationRequest> backend_requests =
      ToGenerationRequests(request, ctx.id, arrival);
  std::unique_ptr<GenerationSession> session(
      new GenerationSession(std::move(request), std::move(ctx), env, inbox));
  for (size_t i = 0; i < backend_requests.size(); ++i) {
    std::string id = backend_requests[i].request_id;
    EventCallback cb = [inbox, i](const GenerationEvent& e) {
      return inbox->Push(i, e);
    };
    absl::Status s =
        env.backend->Submit(std::move(backend_requests[i]), std::move(cb));
    if (!s.ok()) {
      // Refused: withdraw the prompts already submitted, count nothing.
      session->cancelled_ = true;
      inbox->Close(/*count_aborts=*/false);
      for (const std::string& submitted : session->backend_ids_)
        env.backend->Cancel(submitted);
      return s;
    }
    session->backend_ids_.push_back(std::move(id));
  }
  return session;
}

GenerationSession::~GenerationSession() { Cancel(); }

void GenerationSession::Cancel() {
  std::lock_guard<std::mutex> lock(cancel_mu_);
  if (cancelled_) return;
  cancelled_ = true;
  for (size_t i : inbox_->Close()) {
    if (i < backend_ids_.size()) env_.backend->Cancel(backend_ids_[i]);
  }
}

absl::StatusOr<std::string> GenerationSession::Complete(
    const std::function<bool()>& alive) {
  ResponseBuilder builder(ctx_, request_.prompts, *env_.text);
  while (!builder.AllFinished()) {
    auto events = inbox_->Wait(env_.poll_interval);
    if (events.empty()) {
      if (inbox_->closed()) return absl::CancelledError("request cancelled");
      if (alive && !alive()) {
        Cancel();
        return absl::CancelledError("client disconnected");
      }
      continue;
    }
    for (auto& [choice, e] : events) {
      if (!e.status.ok()) {
        Cancel();
        return e.status;
      }
      builder.Add(choice, e);
    }
  }
  return builder.Json();
}

bool GenerationSession::Stream(
    const std::function<bool(const std::string&)>& write,
    const std::function<bool()>& alive) {
  SseStream stream(ctx_, request_.prompts, *env_.text);
  std::string start = stream.Start();
  if (!start.empty() && !write(start)) {
    Cancel();
    return false;
  }
  while (!stream.AllFinished()) {
    auto events = inbox_->Wait(env_.poll_interval);
    if (events.empty()) {
      if (inbox_->closed() || (alive && !alive())) {
        Cancel();
        return false;
      }
      continue;
    }
    std::string out;
    for (auto& [choice, e] : events) {
      if (!e.status.ok()) {
        Cancel();
        out += SseStream::ErrorFrame(ToApiError(e.status));
        out += "data: [DONE]\n\n";
        return write(out);
      }
      out += stream.Event(choice, e);
    }
    if (!out.empty() && !write(out)) {
      Cancel();
      return false;
    }
  }
  return write(stream.End());
}

}  // namespace tandem::frontend
