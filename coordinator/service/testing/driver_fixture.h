// A test fixture wiring the coordinator's pieces over loopback gRPC: a
// WorkerRegistry served on 127.0.0.1 (ephemeral port), a StepDriver
// listening to it, and fake gpu_workers that register and heartbeat.
#ifndef TANDEM_COORDINATOR_SERVICE_TESTING_DRIVER_FIXTURE_H_
#define TANDEM_COORDINATOR_SERVICE_TESTING_DRIVER_FIXTURE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/service/step_driver.h"
#include "coordinator/service/testing/event_collector.h"
#include "coordinator/service/testing/fake_worker.h"
#include "coordinator/service/worker_registry.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace tandem::coord::testing {

class DriverFixture : public ::testing::Test {
 protected:
  static constexpr int64_t kVocab = 1000;
  static constexpr int32_t kEos = 2;

  // max_context 64, block_size 4, kv_blocks 64 (4 sequences' worth).
  static StepDriverConfig BaseConfig() {
    StepDriverConfig c;
    c.model.model_path = "/models/fake";
    c.model.max_context = 64;
    c.model.block_size = 4;
    c.model.kv_blocks = 64;
    c.max_num_batched_tokens = 256;
    c.max_num_seqs = 8;
    c.eos_token_ids = {kEos};
    c.vocab_size = kVocab;
    c.default_seed = 7;
    c.step_timeout = absl::Seconds(20);
    c.load_retry_interval = absl::Milliseconds(50);
    c.log = [](const std::string&) {};
    return c;
  }

  // Starts the registry (and its server) and the driver.
  void StartCoordinator(StepDriverConfig config = BaseConfig(),
                        absl::Duration dead_after = absl::Seconds(1)) {
    WorkerRegistryOptions ro;
    ro.heartbeat_interval = absl::Milliseconds(100);
    ro.dead_after = dead_after;
    ro.log = [](const std::string&) {};
    auto reg = WorkerRegistry::Create(ro);
    ASSERT_TRUE(reg.ok()) << reg.status();
    registry_ = *std::move(reg);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                       &port);
    b.RegisterService(registry_.get());
    registry_server_ = b.BuildAndStart();
    ASSERT_NE(registry_server_, nullptr);
    registry_address_ = absl::StrCat("127.0.0.1:", port);
    auto driver = StepDriver::Create(std::move(config));
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
    registry_->SetListener(driver_.get());
  }

  // A fake gpu_worker registered with the registry; `setup` (optional)
  // runs before it registers.
  FakeWorkerServer* AddWorker(
      FakeWorker::Options options = {kVocab},
      const std::function<void(FakeWorker&)>& setup = nullptr) {
    auto w = FakeWorkerServer::Start(options);
    EXPECT_NE(w, nullptr);
    if (w == nullptr) return nullptr;
    if (setup) setup(w->worker());
    const absl::Status s = w->RegisterWith(registry_address_);
    EXPECT_TRUE(s.ok()) << s;
    workers_.push_back(std::move(w));
    return workers_.back().get();
  }

  void TearDown() override {
    if (registry_ != nullptr) registry_->SetListener(nullptr);
    if (driver_ != nullptr) driver_->Stop();
    workers_.clear();
    if (registry_server_ != nullptr) registry_server_->Shutdown();
    driver_.reset();
    registry_.reset();
  }

  int64_t Submit(std::vector<int32_t> prompt, GenerationParams params,
                 EventCallback cb = nullptr) {
    GenerationRequest r;
    r.prompt_ids = std::move(prompt);
    r.params = std::move(params);
    auto id = driver_->Submit(std::move(r), cb ? cb : events_.Callback());
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : -1;
  }

  bool WaitReady(absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!driver_->ready()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  // What the fake worker generates for `prompt` (hash rule, no script).
  static std::vector<int32_t> Expected(std::vector<int32_t> prompt, int64_t n,
                                       float temperature = 0.0f,
                                       uint64_t seed = 7) {
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t =
          FakeWorker::HashToken(prompt, kVocab, temperature, seed, i);
      out.push_back(t);
      prompt.push_back(t);
    }
    return out;
  }

  static std::vector<int32_t> Prompt(int n, int32_t first = 100) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = first + i;
    return p;
  }

  static GenerationParams Greedy(int64_t max_tokens) {
    GenerationParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    return p;
  }

  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<grpc::Server> registry_server_;
  std::string registry_address_;
  std::unique_ptr<StepDriver> driver_;
  std::vector<std::unique_ptr<FakeWorkerServer>> workers_;
  EventCollector events_;
};

}  // namespace tandem::coord::testing

#endif  // TANDEM_COORDINATOR_SERVICE_TESTING_DRIVER_FIXTURE_H_
