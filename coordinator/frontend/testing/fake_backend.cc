#include "coordinator/frontend/testing/fake_backend.h"

#include <cmath>
#include <limits>
#include <utility>

#include "coordinator/frontend/testing/fake_text_processor.h"

namespace tandem::frontend::testing {

FakeBackend::FakeBackend(Options options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

FakeBackend::~FakeBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

absl::Status FakeBackend::Submit(GenerationRequest request,
                                 EventCallback on_event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!submit_status_.ok()) return submit_status_;
  if (submit_budget_ == 0)
    return absl::ResourceExhaustedError("no capacity left");
  if (submit_budget_ > 0) --submit_budget_;
  if (request.prompt_ids.empty())
    return absl::InvalidArgumentError("empty prompt");
  submitted_.push_back(request);
  std::string id = request.request_id;
  Active a{std::move(request), std::move(on_event),
           std::chrono::steady_clock::now()};
  active_.emplace(id, std::move(a));
  cv_.notify_all();
  return absl::OkStatus();
}

void FakeBackend::Cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(request_id);
  if (it == active_.end()) return;
  active_.erase(it);
  cancelled_.insert(request_id);
  cv_.notify_all();
}

void FakeBackend::set_submit_status(absl::Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  submit_status_ = std::move(s);
}

void FakeBackend::set_submit_budget(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  submit_budget_ = n;
}

void FakeBackend::set_paused(bool paused) {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = paused;
  cv_.notify_all();
}

void FakeBackend::set_step(std::chrono::milliseconds step) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.step = step;
}

std::vector<GenerationRequest> FakeBackend::submitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

std::optional<GenerationRequest> FakeBackend::last_submitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (submitted_.empty()) return std::nullopt;
  return submitted_.back();
}

std::set<std::string> FakeBackend::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool FakeBackend::WaitCancelled(const std::string& id,
                                std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return cancelled_.count(id) > 0; });
}

bool FakeBackend::WaitSubmitted(size_t n,
                                std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return submitted_.size() >= n; });
}

size_t FakeBackend::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_.size();
}

namespace {
TokenLogprob MakeLogprob(int32_t id, int32_t k, float logprob) {
  TokenLogprob lp;
  lp.id = id;
  lp.logprob = logprob;
  lp.top.emplace_back(id, logprob);
  for (int32_t j = 1; j < k; ++j) {
    lp.top.emplace_back((id + j) % 256, -0.5f - static_cast<float>(j));
  }
  return lp;
}
}  // namespace

GenerationEvent FakeBackend::Step(Active& a) {
  const SamplingOptions& s = a.request.sampling;
  GenerationEvent e;
  e.cached_prompt_tokens = options_.cached_prompt_tokens;
  if (a.generated == 0) {
    auto waited = std::chrono::steady_clock::now() - a.request.arrival_time;
    e.queue_time_s = std::chrono::duration<double>(waited).count();
    if (s.prompt_logprobs >= 0) {
      for (size_t i = 0; i < a.request.prompt_ids.size(); ++i) {
        int32_t id = a.request.prompt_ids[i];
        if (i == 0) {
          TokenLogprob first;
          first.id = id;
          first.logprob = std::numeric_limits<float>::quiet_NaN();
          e.prompt_logprobs.push_back(first);
        } else {
          e.prompt_logprobs.push_back(
              MakeLogprob(id, s.prompt_logprobs, -1.0f));
        }
      }
    }
  }
  const std::string& reply = options_.reply;
  const bool exhausted = options_.reply_ends_with_eos && !s.ignore_eos &&
                         a.generated >= static_cast<int64_t>(reply.size());
  int32_t id =
      exhausted ? FakeTextProcessor::kEos
                : static_cast<unsigned char>(reply[a.generated % reply.size()]);
  e.token_ids.push_back(id);
  if (s.logprobs >= 0)
    e.logprobs.push_back(MakeLogprob(id, s.logprobs, -0.25f));
  ++a.generated;
  if (exhausted) {
    e.finished = true;
    e.finish_reason = FinishReason::kStop;
    e.stop_token_id = id;
    return e;
  }
  std::string piece(1, static_cast<char>(id));
  a.text += piece;
  e.text = piece;
  for (const std::string& stop : s.stop) {
    size_t pos = a.text.find(stop);
    if (pos != std::string::npos) {
      // Cut the text at the stop string (this event's piece may end in it).
      size_t before = a.text.size() - piece.size();
      e.text = pos >= before ? a.text.substr(before, pos - before) : "";
      e.finished = true;
      e.finish_reason = FinishReason::kStop;
      e.stop_string = stop;
      return e;
    }
  }
  if (options_.fail_after_tokens > 0 &&
      a.generated >= options_.fail_after_tokens) {
    e.finished = true;
    e.status = absl::UnavailableError("worker lost");
    return e;
  }
  if (a.generated >= s.max_tokens) {
    e.finished = true;
    e.finish_reason = FinishReason::kLength;
  }
  return e;
}

void FakeBackend::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.step, [&] { return stop_; });
    if (stop_) break;
    if (paused_) continue;
    // Take one event per ready request, deliver outside the lock.
    std::vector<
        std::pair<std::string, std::pair<GenerationEvent, EventCallback>>>
        batch;
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, a] : active_) {
      if (now - a.start < options_.queue_delay) continue;
      batch.emplace_back(id, std::make_pair(Step(a), a.on_event));
    }
    lock.unlock();
    std::vector<std::pair<std::string, bool>> outcomes;  // id, keep going
    for (auto& [id, ev] : batch) {
      bool ok = ev.second(ev.first);
      outcomes.emplace_back(id, ok && !ev.first.finished);
      if (!ok) outcomes.back().second = false;
      if (!ok) {
        std::lock_guard<std::mutex> g(mu_);
        if (active_.erase(id) > 0) cancelled_.insert(id);
        cv_.notify_all();
      }
    }
    lock.lock();
    for (auto& [id, keep] : outcomes) {
      if (!keep) active_.erase(id);
    }
    cv_.notify_all();
  }
}

}  // namespace tandem::frontend::testing
