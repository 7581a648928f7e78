// Records the GenerationEvents a StepDriver delivers, per request, and lets
// a test wait for requests to finish. Also checks the delivery contract as
// events arrive: nothing after the final event, one callback at a time per
// request.
#ifndef TANDEM_COORDINATOR_SERVICE_TESTING_EVENT_COLLECTOR_H_
#define TANDEM_COORDINATOR_SERVICE_TESTING_EVENT_COLLECTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/service/generation_types.h"

namespace tandem::coord::testing {

struct RequestLog {
  std::vector<GenerationEvent> events;
  std::vector<int32_t> tokens;  // all token ids, in order
  std::string text;             // all text deltas joined
  int finals = 0;               // events with finished = true
  int after_final = 0;          // events after the final one (must be 0)
  int concurrent = 0;           // overlapping callbacks (must be 0)
  bool done() const { return finals > 0; }
  const GenerationEvent& last() const { return events.back(); }
};

class EventCollector {
 public:
  // Records every event. The callback returns false (consumer gone) for a
  // request once `disconnect_after` of its events were seen (<0: never).
  EventCallback Callback(int disconnect_after = -1) {
    return [this, disconnect_after](const GenerationEvent& e) {
      {
        absl::MutexLock lock(&mu_);
        if (in_callback_[e.request_id]++ > 0) ++logs_[e.request_id].concurrent;
      }
      absl::MutexLock lock(&mu_);
      RequestLog& log = logs_[e.request_id];
      if (log.done()) ++log.after_final;
      log.events.push_back(e);
      log.tokens.insert(log.tokens.end(), e.token_ids.begin(),
                        e.token_ids.end());
      log.text += e.text;
      if (e.finished) ++log.finals;
      --in_callback_[e.request_id];
      return disconnect_after < 0 ||
             static_cast<int>(log.events.size()) < disconnect_after;
    };
  }

  bool WaitDone(int64_t id, absl::Duration timeout = absl::Seconds(30)) {
    return WaitAllDone({id}, timeout);
  }
  bool WaitAllDone(const std::vector<int64_t>& ids,
                   absl::Duration timeout = absl::Seconds(60)) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (int64_t id : ids) {
        auto it = logs_.find(id);
        if (it == logs_.end() || !it->second.done()) return false;
      }
      return true;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  // Waits until `id` has at least `n` events.
  bool WaitEvents(int64_t id, size_t n,
                  absl::Duration timeout = absl::Seconds(30)) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      auto it = logs_.find(id);
      return it != logs_.end() && it->second.events.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  RequestLog Get(int64_t id) const {
    absl::MutexLock lock(&mu_);
    auto it = logs_.find(id);
    return it == logs_.end() ? RequestLog() : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, RequestLog> logs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, int> in_callback_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::coord::testing

#endif  // TANDEM_COORDINATOR_SERVICE_TESTING_EVENT_COLLECTOR_H_
