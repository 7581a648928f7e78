// Registration against an in-process fake Registry: registers with who and
// where the worker is, heartbeats at the interval asked for (with
// steps_done), registers again when the registry forgets it or restarts on
// the same port, and stops promptly even when the coordinator is gone.
#include "gpu_worker/service/registration.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "gpu_worker/service/testing/fake_registry.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::FakeRegistry;
using testing::StartServer;

RegistrationOptions Options(int port) {
  RegistrationOptions o;
  o.coordinator = absl::StrCat("127.0.0.1:", port);
  o.self.set_kind(proto::WORKER_KIND_GPU);
  o.self.set_address("127.0.0.1:4242");
  o.self.set_device("host");
  o.self.set_rank(0);
  o.self.set_pid(getpid());
  o.self.set_hostname(LocalHostname());
  o.retry_interval = absl::Milliseconds(50);
  o.log = [](const std::string&) {};
  return o;
}

TEST(Registration, RegistersAndHeartbeats) {
  FakeRegistry registry(/*heartbeat_ms=*/20);
  int port = 0;
  auto server = StartServer(&registry, 0, &port);
  ASSERT_NE(server, nullptr);
  std::atomic<int64_t> steps{41};
  RegistrationOptions o = Options(port);
  o.steps_done = [&] { return steps.load(); };
  auto reg = Registration::Start(o);
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_TRUE((*reg)->WaitRegistered(absl::Seconds(10)));
  EXPECT_EQ((*reg)->worker_id(), "w1");
  const proto::RegisterRequest got = registry.last_request();
  EXPECT_EQ(got.kind(), proto::WORKER_KIND_GPU);
  EXPECT_EQ(got.address(), "127.0.0.1:4242");
  EXPECT_EQ(got.device(), "host");
  EXPECT_EQ(got.pid(), getpid());
  EXPECT_EQ(got.hostname(), LocalHostname());
  steps = 42;
  ASSERT_TRUE(registry.WaitHeartbeats(5, absl::Seconds(10)));
  EXPECT_EQ(registry.registrations(), 1);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(registry.last_steps_done(), 42);
  (*reg)->Stop();
  const int64_t beats = registry.heartbeats();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(registry.heartbeats(), beats);  // stopped means stopped
  server->Shutdown();
}

TEST(Registration, RegistersAgainWhenForgotten) {
  FakeRegistry registry(20);
  int port = 0;
  auto server = StartServer(&registry, 0, &port);
  auto reg = Registration::Start(Options(port));
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE(registry.WaitRegistrations(1, absl::Seconds(10)));
  registry.ForgetAll();
  ASSERT_TRUE(registry.WaitRegistrations(2, absl::Seconds(10)));
  ASSERT_TRUE((*reg)->WaitRegistered(absl::Seconds(10)));
  EXPECT_EQ((*reg)->registrations(), 2);
  server->Shutdown();
}

TEST(Registration, RegistersWithARestartedCoordinator) {
  auto first = std::make_unique<FakeRegistry>(20);
  int port = 0;
  auto server = StartServer(first.get(), 0, &port);
  ASSERT_GT(port, 0);
  auto reg = Registration::Start(Options(port));
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE(first->WaitRegistrations(1, absl::Seconds(10)));
  server->Shutdown();
  server->Wait();
  absl::SleepFor(absl::Milliseconds(200));  // heartbeats fail meanwhile

  FakeRegistry second(20);  // knows nobody
  int again = 0;
  auto server2 = StartServer(&second, port, &again);
  ASSERT_EQ(again, port);
  ASSERT_TRUE(second.WaitRegistrations(1, absl::Seconds(10)));
  ASSERT_TRUE(second.WaitHeartbeats(2, absl::Seconds(10)));
  EXPECT_EQ((*reg)->registrations(), 2);
  server2->Shutdown();
}

TEST(Registration, KeepsTryingAndStopsPromptlyWithoutACoordinator) {
  FakeRegistry registry;
  int port = 0;
  auto server = StartServer(&registry, 0, &port);
  server->Shutdown();
  server->Wait();  // nothing listens on `port` now
  auto reg = Registration::Start(Options(port));
  ASSERT_TRUE(reg.ok());
  EXPECT_FALSE((*reg)->WaitRegistered(absl::Milliseconds(300)));
  const absl::Time t0 = absl::Now();
  (*reg)->Stop();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
}

TEST(Registration, RejectsMissingAddresses) {
  RegistrationOptions o = Options(1);
  o.coordinator.clear();
  EXPECT_EQ(Registration::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(1);
  o.self.clear_address();
  EXPECT_EQ(Registration::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
