// A GenerationBackend for tests. A worker thread advances every active
// request by one token each `step` (after the request has waited
// `queue_delay`): output token k of a request is byte k of `reply` (cycled).
// The request finishes with "length" at max_tokens, or with "stop" when the
// text reaches a stop string (cut before it) or when reply_ends_with_eos and
// the reply is exhausted (stop token <eos>). Log-probs: the sampled token
// -0.25, alternatives (id+1)%256, (id+2)%256, … at -1.5, -2.5, …; prompt
// log-probs -1.0 (the first NaN).
#ifndef TANDEM_COORDINATOR_FRONTEND_TESTING_FAKE_BACKEND_H_
#define TANDEM_COORDINATOR_FRONTEND_TESTING_FAKE_BACKEND_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/frontend/generation_backend.h"

namespace tandem::frontend::testing {

class FakeBackend : public GenerationBackend {
 public:
  struct Options {
    int64_t max_context = 256;
    std::string reply = "Hello, world! This is the fake backend.";
    bool reply_ends_with_eos = true;
    std::chrono::milliseconds step{2};
    std::chrono::milliseconds queue_delay{0};
    // > 0: after this many tokens the request fails with kUnavailable.
    int64_t fail_after_tokens = 0;
    // Reported in every event as GenerationEvent.cached_prompt_tokens.
    int64_t cached_prompt_tokens = -1;
  };
  FakeBackend() : FakeBackend(Options()) {}
  explicit FakeBackend(Options options);
  ~FakeBackend() override;

  absl::Status Submit(GenerationRequest request,
                      EventCallback on_event) override;
  void Cancel(const std::string& request_id) override;
  bool Ready() const override { return ready_.load(); }
  int64_t max_context() const override { return options_.max_context; }

  // Test controls.
  void set_ready(bool ready) { ready_ = ready; }
  void set_submit_status(absl::Status s);  // returned by every Submit while set
  // After `n` more accepted submissions, Submit returns kResourceExhausted
  // (n < 0: no limit).
  void set_submit_budget(int n);
  void set_paused(bool paused);  // requests make no progress
  void set_step(std::chrono::milliseconds step);

  // Observations.
  std::vector<GenerationRequest> submitted() const;
  std::optional<GenerationRequest> last_submitted() const;
  // Ids stopped from the frontend side (Cancel or on_event returning false).
  std::set<std::string> cancelled() const;
  // Waits until `id` is cancelled; false on timeout.
  bool WaitCancelled(const std::string& id,
                     std::chrono::milliseconds timeout) const;
  // Waits until `n` requests have been submitted; false on timeout.
  bool WaitSubmitted(size_t n, std::chrono::milliseconds timeout) const;
  size_t active() const;

 private:
  struct Active {
    GenerationRequest request;
    EventCallback on_event;
    std::chrono::steady_clock::time_point start;
    int64_t generated = 0;
    std::string text;
    bool cancel_requested = false;
  };
  void Loop();
  // Builds the next event; true when it finishes the request.
  GenerationEvent Step(Active& a);

  Options options_;
  std::atomic<bool> ready_{true};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Active> active_;
  std::vector<GenerationRequest> submitted_;
  std::set<std::string> cancelled_;
  absl::Status submit_status_;
  int submit_budget_ = -1;
  bool paused_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tandem::frontend::testing

#endif  // TANDEM_COORDINATOR_FRONTEND_TESTING_FAKE_BACKEND_H_
