// Keeps this worker registered with the coordinator's Registry: Register,
// then a Heartbeat every heartbeat_interval_ms the coordinator asked for, on
// a thread of its own. Registers again when the coordinator answers
// known=false (it restarted or forgot the worker). While the coordinator is
// unreachable, Register is retried every retry_interval and heartbeats keep
// their id; nothing here gives up: a worker outlives a coordinator restart.
#ifndef TANDEM_GPU_WORKER_SERVICE_REGISTRATION_H_
#define TANDEM_GPU_WORKER_SERVICE_REGISTRATION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"

namespace tandem {

struct RegistrationOptions {
  std::string coordinator;      // HOST:PORT of the Registry
  proto::RegisterRequest self;  // kind, address, device, rank, pid, hostname
  absl::Duration rpc_timeout = absl::Seconds(5);
  absl::Duration retry_interval = absl::Milliseconds(500);  // after a failed Register
  std::function<int64_t()> steps_done;                      // reported in heartbeats; may be empty
  std::function<void(const std::string&)> log;              // default: stderr
};

class Registration {
 public:
  // Starts the thread; the first Register happens on it.
  static absl::StatusOr<std::unique_ptr<Registration>> Start(RegistrationOptions options);
  ~Registration();  // Stop()

  // Ends the thread promptly (an RPC in flight is cancelled). Idempotent.
  void Stop();
  // True once registered (now or within `timeout`).
  bool WaitRegistered(absl::Duration timeout);

  std::string worker_id() const;  // empty while unregistered
  int64_t registrations() const;  // successful Register calls so far
  int64_t heartbeats() const;     // successful Heartbeat calls so far

 private:
  explicit Registration(RegistrationOptions options);
  void Loop();
  // One RPC under a cancellable context; false if stopping.
  bool Register();
  void Heartbeat();
  // Sleeps until `d` passes or Stop(); false if stopping.
  bool Sleep(absl::Duration d);
  void Log(const std::string& line);

  RegistrationOptions options_;
  std::unique_ptr<proto::Registry::Stub> stub_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_;  // logged once per change (thread only)
};

// This machine's host name ("localhost" if it has none).
std::string LocalHostname();

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_SERVICE_REGISTRATION_H_
