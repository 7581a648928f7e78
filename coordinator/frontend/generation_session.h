// One API request in flight: submits a backend request per prompt, gathers
// their events (from backend threads) in an inbox, records the per-request
// metrics, and produces either the final JSON body or the SSE frames. Knows
// nothing of HTTP: the server passes in `write` / `alive` functions.
//
// Cancellation: when the client goes away (a write fails, or `alive`
// returns false while waiting), the session closes its inbox so every later
// backend callback returns false, and calls backend->Cancel for each
// unfinished request. The destructor does the same for anything unfinished.
#ifndef TANDEM_COORDINATOR_FRONTEND_GENERATION_SESSION_H_
#define TANDEM_COORDINATOR_FRONTEND_GENERATION_SESSION_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/frontend/generation_backend.h"
#include "coordinator/frontend/metrics.h"
#include "coordinator/frontend/request_parser.h"
#include "coordinator/frontend/response_common.h"

namespace tandem::frontend {

using Clock = std::chrono::steady_clock;

// "cmpl-" / "chatcmpl-" followed by 32 random hex digits.
std::string NewResponseId(Endpoint endpoint);

// Thread-safe queue of (choice, event) pairs fed by backend callbacks. Also
// records token metrics at arrival time.
class SessionInbox {
 public:
  SessionInbox(size_t num_choices, std::vector<int64_t> prompt_tokens,
               Clock::time_point arrival, Metrics* metrics);
  // False once closed (the backend must stop the request).
  bool Push(size_t choice, const GenerationEvent& e);
  // Waits up to `timeout` for events and takes them all.
  std::vector<std::pair<size_t, GenerationEvent>> Wait(
      std::chrono::milliseconds timeout);
  // Closes the inbox; returns the indices of choices that had not finished.
  // count_aborts: record them as finished with "abort" in the metrics (not
  // for a request that was refused at submission).
  std::vector<size_t> Close(bool count_aborts = true);
  bool closed() const;

 private:
  struct Track {
    bool first_token_seen = false;
    bool finished = false;
    Clock::time_point last_token;
    int64_t generated = 0;
  };
  void RecordLocked(size_t choice, const GenerationEvent& e,
                    Clock::time_point now);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<size_t, GenerationEvent>> events_;
  std::vector<Track> tracks_;
  std::vector<int64_t> prompt_tokens_;
  Clock::time_point arrival_;
  Metrics* metrics_;
  bool closed_ = false;
};

struct SessionEnv {
  GenerationBackend* backend = nullptr;
  const TextProcessor* text = nullptr;
  Metrics* metrics = nullptr;  // optional
  std::chrono::milliseconds poll_interval{50};
};

class GenerationSession {
 public:
  // Submits every prompt. If a submission fails, those already submitted are
  // cancelled and its status is returned (the HTTP layer maps it).
  static absl::StatusOr<std::unique_ptr<GenerationSession>> Start(
      ParsedRequest request, std::string response_id, int64_t created,
      Clock::time_point arrival, SessionEnv env);
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Non-streaming: waits for every choice; the response body, or the first
  // failure. `alive` (optional) is polled while waiting; false cancels.
  absl::StatusOr<std::string> Complete(
      const std::function<bool()>& alive = nullptr);

  // Streaming: writes SSE frames until data: [DONE]. `write` returns false
  // when the client is gone; `alive` is polled while no event comes. Returns
  // false if the client went away (the requests are cancelled).
  bool Stream(const std::function<bool(const std::string&)>& write,
              const std::function<bool()>& alive);

  // Cancels every unfinished request (idempotent).
  void Cancel();

  const std::string& response_id() const { return ctx_.id; }
  const ParsedRequest& request() const { return request_; }

 private:
  GenerationSession(ParsedRequest request, ResponseContext ctx, SessionEnv env,
                    std::shared_ptr<SessionInbox> inbox);

  ParsedRequest request_;
  ResponseContext ctx_;
  SessionEnv env_;
  std::shared_ptr<SessionInbox> inbox_;
  std::vector<std::string> backend_ids_;
  std::mutex cancel_mu_;
  bool cancelled_ = false;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_GENERATION_SESSION_H_
