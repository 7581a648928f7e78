// An in-process Registry for tests: hands out ids, counts registrations and
// heartbeats, remembers the last RegisterRequest, and can forget its workers
// (a coordinator restart looks like this from the worker's side).
#ifndef TANDEM_GPU_WORKER_SERVICE_TESTING_FAKE_REGISTRY_H_
#define TANDEM_GPU_WORKER_SERVICE_TESTING_FAKE_REGISTRY_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "proto/worker.grpc.pb.h"

namespace tandem::testing {

class FakeRegistry final : public proto::Registry::Service {
 public:
  explicit FakeRegistry(int64_t heartbeat_ms = 50) : heartbeat_ms_(heartbeat_ms) {}

  grpc::Status Register(grpc::ServerContext*, const proto::RegisterRequest* req,
                        proto::RegisterResponse* resp) override {
    absl::MutexLock lock(&mu_);
    const std::string id = absl::StrCat("w", ++registrations_);
    known_.insert(id);
    last_ = *req;
    resp->set_worker_id(id);
    resp->set_heartbeat_interval_ms(heartbeat_ms_);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const proto::HeartbeatRequest* req,
                         proto::HeartbeatResponse* resp) override {
    absl::MutexLock lock(&mu_);
    ++heartbeats_;
    last_steps_done_ = req->steps_done();
    resp->set_known(known_.contains(req->worker_id()));
    return grpc::Status::OK;
  }

  void ForgetAll() {
    absl::MutexLock lock(&mu_);
    known_.clear();
  }
  int64_t registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  int64_t heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  int64_t last_steps_done() const {
    absl::MutexLock lock(&mu_);
    return last_steps_done_;
  }
  proto::RegisterRequest last_request() const {
    absl::MutexLock lock(&mu_);
    return last_;
  }
  // Waits until registrations() >= n.
  bool WaitRegistrations(int64_t n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return registrations_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  bool WaitHeartbeats(int64_t n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return heartbeats_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

 private:
  const int64_t heartbeat_ms_;
  mutable absl::Mutex mu_;
  int64_t registrations_ = 0, heartbeats_ = 0, last_steps_done_ = 0;
  absl::flat_hash_set<std::string> known_;
  proto::RegisterRequest last_;
};

// A gRPC server on 127.0.0.1:`port` (0 = any free port) serving `service`.
inline std::unique_ptr<grpc::Server> StartServer(grpc::Service* service, int port, int* bound) {
  grpc::ServerBuilder b;
  b.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), bound);
  b.RegisterService(service);
  return b.BuildAndStart();
}

}  // namespace tandem::testing

#endif  // TANDEM_GPU_WORKER_SERVICE_TESTING_FAKE_REGISTRY_H_
