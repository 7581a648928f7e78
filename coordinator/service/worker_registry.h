// The coordinator's worker registry: serves proto::Registry. Workers call
// Register (→ an id and the heartbeat interval to keep) and then Heartbeat
// every interval. A worker silent for longer than `dead_after` is declared
// dead and forgotten (its next heartbeat gets known=false, so it registers
// again if it is still alive). A worker registering with the address of a
// live one replaces it (the old entry is declared dead first: the process
// restarted).
//
// A WorkerListener (the step driver) hears of each registration and death.
// Listener calls are made one at a time, in the order the registry changed,
// never under the registry's table lock (the listener may call workers(),
// but not Register/Heartbeat/SetListener). A monitor thread checks for
// silent workers every min(dead_after / 4, 100 ms), so a death is noticed
// within dead_after + 100 ms.
#ifndef TANDEM_COORDINATOR_SERVICE_WORKER_REGISTRY_H_
#define TANDEM_COORDINATOR_SERVICE_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"

namespace tandem::coord {

struct WorkerInfo {
  std::string id;  // "gpu-3", "cpu-4": never reused within a registry
  proto::WorkerKind kind = proto::WORKER_KIND_UNSPECIFIED;
  std::string address;  // where it serves proto::Worker
  std::string device;
  int32_t rank = 0;
  int64_t pid = 0;
  std::string hostname;
  absl::Time registered_at;
  absl::Time last_heartbeat;  // registration counts as one
  int64_t steps_done = 0;     // as of the last heartbeat
};

class WorkerListener {
 public:
  virtual ~WorkerListener() = default;
  virtual void OnWorkerRegistered(const WorkerInfo& worker) = 0;
  // `reason`: e.g. "no heartbeat for 1.2s", "re-registered at 127.0.0.1:5".
  virtual void OnWorkerDead(const WorkerInfo& worker,
                            absl::string_view reason) = 0;
};

struct WorkerRegistryOptions {
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  absl::Duration dead_after = absl::Seconds(1);  // > heartbeat_interval
  std::function<void(const std::string&)> log;   // default: stderr
};

class WorkerRegistry final : public proto::Registry::Service {
 public:
  // InvalidArgument unless 0 < heartbeat_interval < dead_after. Starts the
  // monitor thread.
  static absl::StatusOr<std::unique_ptr<WorkerRegistry>> Create(
      WorkerRegistryOptions options = {});
  ~WorkerRegistry() override;  // Stop()

  // --- gRPC handlers ---
  grpc::Status Register(grpc::ServerContext* ctx,
                        const proto::RegisterRequest* req,
                        proto::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx,
                         const proto::HeartbeatRequest* req,
                         proto::HeartbeatResponse* resp) override;

  // --- the same, in absl terms ---
  // InvalidArgument for a missing kind or address.
  absl::StatusOr<proto::RegisterResponse> DoRegister(
      const proto::RegisterRequest& req);
  proto::HeartbeatResponse DoHeartbeat(const proto::HeartbeatRequest& req);

  // Replaces the listener (nullptr: none) and tells the new one of every
  // live worker, in registration order, before any later change.
  void SetListener(WorkerListener* listener);

  // Declares a worker dead now (an operator's or a test's decision); false
  // if it is not known.
  bool Expire(const std::string& worker_id, absl::string_view reason);

  // Live workers in registration order.
  std::vector<WorkerInfo> workers() const;
  std::optional<WorkerInfo> Find(const std::string& worker_id) const;
  // Waits until at least `n` live workers of `kind` are registered.
  bool WaitForWorkers(proto::WorkerKind kind, int n,
                      absl::Duration timeout) const;

  // Ends the monitor thread (no more deaths are declared). Idempotent.
  void Stop();

  const WorkerRegistryOptions& options() const { return options_; }

 private:
  explicit WorkerRegistry(WorkerRegistryOptions options);
  void Monitor();
  void Log(const std::string& line) const;
  // Removes dead entries (under mu_) and returns them with their reason.
  std::vector<std::pair<WorkerInfo, std::string>> CollectDead(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerRegistryOptions options_;

  // Held while the table changes and its listener calls are made, so
  // listeners hear of changes in order. Taken before mu_.
  absl::Mutex listener_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  WorkerListener* listener_ ABSL_GUARDED_BY(listener_mu_) = nullptr;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // registration order
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread monitor_;
};

const char* WorkerKindName(proto::WorkerKind kind);  // "gpu", "cpu", "?"

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_WORKER_REGISTRY_H_
