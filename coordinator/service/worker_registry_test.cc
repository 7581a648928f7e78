#include "coordinator/service/worker_registry.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/service/testing/fake_worker.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace tandem::coord {
namespace {

// Records listener calls as "+id@address" and "-id".
class RecordingListener : public WorkerListener {
 public:
  void OnWorkerRegistered(const WorkerInfo& w) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(absl::StrCat("+", w.id, "@", w.address));
  }
  void OnWorkerDead(const WorkerInfo& w, absl::string_view reason) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(absl::StrCat("-", w.id));
    dead_at_ = absl::Now();
    last_reason_ = std::string(reason);
  }
  std::vector<std::string> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  bool WaitCalls(size_t n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return calls_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  absl::Time dead_at() const {
    absl::MutexLock lock(&mu_);
    return dead_at_;
  }
  std::string last_reason() const {
    absl::MutexLock lock(&mu_);
    return last_reason_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> calls_;
  absl::Time dead_at_;
  std::string last_reason_;
};

proto::RegisterRequest Gpu(const std::string& address, int rank = 0) {
  proto::RegisterRequest r;
  r.set_kind(proto::WORKER_KIND_GPU);
  r.set_address(address);
  r.set_device("host");
  r.set_rank(rank);
  r.set_pid(42);
  r.set_hostname("here");
  return r;
}

std::unique_ptr<WorkerRegistry> MakeRegistry(absl::Duration interval,
                                             absl::Duration dead_after) {
  WorkerRegistryOptions o;
  o.heartbeat_interval = interval;
  o.dead_after = dead_after;
  o.log = [](const std::string&) {};
  auto r = WorkerRegistry::Create(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

TEST(WorkerRegistry, RejectsBadOptions) {
  WorkerRegistryOptions o;
  o.heartbeat_interval = absl::Seconds(2);
  o.dead_after = absl::Seconds(1);
  EXPECT_EQ(WorkerRegistry::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkerRegistry, RegisterGivesIdAndIntervalHeartbeatKnowsIt) {
  auto reg = MakeRegistry(absl::Milliseconds(200), absl::Seconds(1));
  auto resp = reg->DoRegister(Gpu("127.0.0.1:1"));
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->worker_id(), "gpu-0");
  EXPECT_EQ(resp->heartbeat_interval_ms(), 200);

  proto::HeartbeatRequest hb;
  hb.set_worker_id("gpu-0");
  hb.set_steps_done(7);
  EXPECT_TRUE(reg->DoHeartbeat(hb).known());
  ASSERT_TRUE(reg->Find("gpu-0").has_value());
  EXPECT_EQ(reg->Find("gpu-0")->steps_done, 7);
  EXPECT_EQ(reg->Find("gpu-0")->pid, 42);
  hb.set_worker_id("gpu-99");
  EXPECT_FALSE(reg->DoHeartbeat(hb).known());
}

TEST(WorkerRegistry, RejectsMissingKindOrAddress) {
  auto reg = MakeRegistry(absl::Milliseconds(200), absl::Seconds(1));
  proto::RegisterRequest r = Gpu("");
  EXPECT_EQ(reg->DoRegister(r).status().code(),
            absl::StatusCode::kInvalidArgument);
  r = Gpu("127.0.0.1:1");
  r.set_kind(proto::WORKER_KIND_UNSPECIFIED);
  EXPECT_EQ(reg->DoRegister(r).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkerRegistry, SilentWorkerIsDeclaredDeadWithinASecond) {
  auto reg = MakeRegistry(absl::Milliseconds(100), absl::Milliseconds(500));
  RecordingListener listener;
  reg->SetListener(&listener);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(reg->DoRegister(Gpu("127.0.0.1:1")).ok());
  ASSERT_TRUE(listener.WaitCalls(2, absl::Seconds(5)));
  EXPECT_EQ(listener.calls(),
            (std::vector<std::string>{"+gpu-0@127.0.0.1:1", "-gpu-0"}));
  const absl::Duration took = listener.dead_at() - t0;
  EXPECT_GE(took, absl::Milliseconds(500));
  EXPECT_LT(took, absl::Milliseconds(1000));
  EXPECT_NE(listener.last_reason().find("no heartbeat"), std::string::npos);
  EXPECT_TRUE(reg->workers().empty());
  // Its next heartbeat learns it was forgotten.
  proto::HeartbeatRequest hb;
  hb.set_worker_id("gpu-0");
  EXPECT_FALSE(reg->DoHeartbeat(hb).known());
}

TEST(WorkerRegistry, HeartbeatsKeepAWorkerAlive) {
  auto reg = MakeRegistry(absl::Milliseconds(50), absl::Milliseconds(300));
  RecordingListener listener;
  reg->SetListener(&listener);
  ASSERT_TRUE(reg->DoRegister(Gpu("127.0.0.1:1")).ok());
  proto::HeartbeatRequest hb;
  hb.set_worker_id("gpu-0");
  for (int i = 0; i < 20; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(reg->DoHeartbeat(hb).known());
  }
  EXPECT_EQ(listener.calls().size(), 1u);
  EXPECT_EQ(reg->workers().size(), 1u);
}

TEST(WorkerRegistry, SameAddressReplacesTheOldEntry) {
  auto reg = MakeRegistry(absl::Milliseconds(200), absl::Seconds(5));
  RecordingListener listener;
  reg->SetListener(&listener);
  ASSERT_TRUE(reg->DoRegister(Gpu("127.0.0.1:1")).ok());
  ASSERT_TRUE(reg->DoRegister(Gpu("127.0.0.1:2")).ok());
  ASSERT_TRUE(reg->DoRegister(Gpu("127.0.0.1:1")).ok());
  EXPECT_EQ(listener.calls(),
            (std::vector<std::string>{"+gpu-0@127.0.0.1:1",
                                      "+gpu-1@127.0.0.1:2", "-gpu-0",
                                      "+gpu-2@127.0.0.1:1"}));
  const std::vector<WorkerInfo> live = reg->workers();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].id, "gpu-1");
  EXPECT_EQ(live[1].id, "gpu-2");
}

TEST(WorkerRegistry, NewListenerHearsOfLiveWorkersAndExpire) {
  auto reg = MakeRegistry(absl::Milliseconds(200), absl::Seconds(5));
  ASSERT_TRUE(reg->DoRegister(Gpu("127.0.0.1:1")).ok());
  proto::RegisterRequest cpu = Gpu("127.0.0.1:3");
  cpu.set_kind(proto::WORKER_KIND_CPU);
  ASSERT_TRUE(reg->DoRegister(cpu).ok());
  RecordingListener listener;
  reg->SetListener(&listener);
  EXPECT_EQ(listener.calls(),
            (std::vector<std::string>{"+gpu-0@127.0.0.1:1",
                                      "+cpu-1@127.0.0.1:3"}));
  EXPECT_TRUE(reg->Expire("gpu-0", "operator"));
  EXPECT_FALSE(reg->Expire("gpu-0", "operator"));
  EXPECT_EQ(listener.calls().back(), "-gpu-0");
  EXPECT_TRUE(reg->WaitForWorkers(proto::WORKER_KIND_CPU, 1,
                                  absl::ZeroDuration()));
  EXPECT_FALSE(reg->WaitForWorkers(proto::WORKER_KIND_GPU, 1,
                                   absl::ZeroDuration()));
  reg->SetListener(nullptr);
}

// Over gRPC, with the fake worker's registration loop.
TEST(WorkerRegistry, ServesRegistryOverGrpc) {
  auto reg = MakeRegistry(absl::Milliseconds(50), absl::Milliseconds(400));
  RecordingListener listener;
  reg->SetListener(&listener);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(reg.get());
  auto server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto worker = testing::FakeWorkerServer::Start();
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(worker->RegisterWith(absl::StrCat("127.0.0.1:", port)).ok());
  ASSERT_TRUE(listener.WaitCalls(1, absl::Seconds(5)));
  EXPECT_EQ(listener.calls()[0], "+gpu-0@" + worker->address());
  // Heartbeats keep it; silence kills it.
  absl::SleepFor(absl::Milliseconds(800));
  EXPECT_EQ(listener.calls().size(), 1u);
  worker->StopHeartbeats();
  ASSERT_TRUE(listener.WaitCalls(2, absl::Seconds(2)));
  EXPECT_EQ(listener.calls()[1], "-gpu-0");

  // A bad Register over the wire is INVALID_ARGUMENT.
  auto stub = proto::Registry::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  proto::RegisterResponse resp;
  EXPECT_EQ(stub->Register(&ctx, proto::RegisterRequest(), &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  server->Shutdown();
}

}  // namespace
}  // namespace tandem::coord
