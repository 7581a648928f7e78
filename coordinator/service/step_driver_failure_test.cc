// Worker failure and recovery: a gpu_worker that dies or goes silent fails
// the running requests (kError, UNAVAILABLE) without hanging, waiting ones
// stay queued and are served once a gpu_worker registers again; failed
// steps and loads; shutdown.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/service/step_driver.h"
#include "coordinator/service/testing/driver_fixture.h"
#include "gtest/gtest.h"

namespace tandem::coord {
namespace {

using testing::RequestLog;

class StepDriverFailureTest : public testing::DriverFixture {
 protected:
  void ExpectWorkerLost(int64_t id) {
    const RequestLog log = events_.Get(id);
    ASSERT_TRUE(log.done()) << id;
    EXPECT_EQ(log.finals, 1);
    EXPECT_EQ(log.last().finish_reason, FinishReason::kError);
    EXPECT_EQ(log.last().status.code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(absl::StrContains(log.last().status.message(), "gpu_worker"))
        << log.last().status;
  }
};

TEST_F(StepDriverFailureTest, DeadWorkerFailsRunningKeepsWaitingAndRecovers) {
  StepDriverConfig c = BaseConfig();
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 64;
  StartCoordinator(c);
  testing::FakeWorkerServer* a = AddWorker();
  a->worker().SetStepDelay(absl::Milliseconds(10));
  std::vector<int64_t> ids;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Prompt(5, 100 + 10 * i));
    ids.push_back(Submit(prompts.back(), Greedy(40)));
  }
  ASSERT_TRUE(events_.WaitEvents(ids[0], 2));
  ASSERT_TRUE(events_.WaitEvents(ids[1], 2));
  a->Kill();  // the step in flight and the next fail with UNAVAILABLE
  ASSERT_TRUE(events_.WaitAllDone({ids[0], ids[1]}, absl::Seconds(10)));
  ExpectWorkerLost(ids[0]);
  ExpectWorkerLost(ids[1]);
  // Tokens streamed before the loss were right (no silent truncation: the
  // request ends with an error, not a normal finish).
  const RequestLog lost = events_.Get(ids[0]);
  const std::vector<int32_t> expected = Expected(prompts[0], 40);
  ASSERT_LE(lost.tokens.size(), expected.size());
  EXPECT_TRUE(std::equal(lost.tokens.begin(), lost.tokens.end(),
                         expected.begin()));
  // The waiting two were never started and are still queued.
  EXPECT_TRUE(events_.Get(ids[2]).events.empty());
  EXPECT_TRUE(events_.Get(ids[3]).events.empty());
  EXPECT_FALSE(events_.Get(ids[2]).done());
  // Not ready until a worker comes back (within a second the registry
  // forgets the dead one).
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_FALSE(driver_->ready());
  EXPECT_EQ(driver_->metrics().num_waiting, 2);

  testing::FakeWorkerServer* b = AddWorker();
  ASSERT_TRUE(events_.WaitAllDone({ids[2], ids[3]}));
  for (int i = 2; i < 4; ++i) {
    const RequestLog log = events_.Get(ids[i]);
    EXPECT_EQ(log.tokens, Expected(prompts[i], 40)) << i;
    EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
  }
  const int64_t later = Submit(Prompt(3, 700), Greedy(5));
  ASSERT_TRUE(events_.WaitDone(later));
  EXPECT_EQ(events_.Get(later).tokens, Expected(Prompt(3, 700), 5));
  EXPECT_EQ(b->worker().loads(), 1);
  const DriverMetrics m = driver_->metrics();
  EXPECT_GE(m.num_worker_losses, 1);
  EXPECT_EQ(m.num_model_loads, 2);
  EXPECT_TRUE(m.ready);
}

TEST_F(StepDriverFailureTest, SilentWorkerIsNoticedByTheMissingHeartbeats) {
  StepDriverConfig c = BaseConfig();
  c.step_timeout = absl::Seconds(60);  // the registry, not the deadline
  StartCoordinator(c, /*dead_after=*/absl::Seconds(1));
  testing::FakeWorkerServer* a = AddWorker();
  ASSERT_TRUE(WaitReady());
  a->worker().HoldSteps(true);  // a step that never ends
  const int64_t id = Submit(Prompt(5), Greedy(10));
  ASSERT_TRUE(a->worker().WaitStepCalls(1, absl::Seconds(5)));
  const absl::Time silent_from = absl::Now();
  a->StopHeartbeats();
  ASSERT_TRUE(events_.WaitDone(id, absl::Seconds(5)));
  const absl::Duration noticed = absl::Now() - silent_from;
  // dead_after is 1 s; the bound leaves room for a loaded 2-core machine and
  // is still far below the 60 s step deadline it must not wait for.
  EXPECT_LT(noticed, absl::Seconds(5)) << noticed;
  ExpectWorkerLost(id);
  EXPECT_TRUE(absl::StrContains(events_.Get(id).last().status.message(),
                                "no heartbeat"))
      << events_.Get(id).last().status;
  EXPECT_FALSE(driver_->ready());
  a->Kill();
  // A new worker serves what comes next.
  AddWorker();
  const int64_t next = Submit(Prompt(4), Greedy(3));
  ASSERT_TRUE(events_.WaitDone(next));
  EXPECT_EQ(events_.Get(next).tokens, Expected(Prompt(4), 3));
}

TEST_F(StepDriverFailureTest, BadStepFailsOnlyItsRequests) {
  StartCoordinator();
  testing::FakeWorkerServer* w = AddWorker();
  ASSERT_TRUE(WaitReady());
  w->worker().FailSteps(1, absl::InvalidArgumentError("bad plan"));
  const int64_t id = Submit(Prompt(5), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kError);
  EXPECT_EQ(log.last().status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(log.last().status.message(), "bad plan"));
  // The worker is still in use: no reload.
  const int64_t next = Submit(Prompt(5), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(next));
  EXPECT_EQ(events_.Get(next).tokens, Expected(Prompt(5), 4));
  EXPECT_EQ(w->worker().loads(), 1);
  EXPECT_EQ(driver_->metrics().num_step_failures, 1);
}

TEST_F(StepDriverFailureTest, StepDeadlineReloadsTheSameWorker) {
  StepDriverConfig c = BaseConfig();
  c.step_timeout = absl::Milliseconds(200);
  StartCoordinator(c);
  testing::FakeWorkerServer* w = AddWorker();
  ASSERT_TRUE(WaitReady());
  w->worker().SetStepDelay(absl::Milliseconds(600));
  const int64_t id = Submit(Prompt(5), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(id));
  ExpectWorkerLost(id);
  w->worker().SetStepDelay(absl::ZeroDuration());
  ASSERT_TRUE(w->worker().WaitLoads(2, absl::Seconds(5)));  // reloaded
  const int64_t next = Submit(Prompt(6), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(next));
  EXPECT_EQ(events_.Get(next).tokens, Expected(Prompt(6), 4));
}

TEST_F(StepDriverFailureTest, WorkerThatLostItsModelIsReloaded) {
  StartCoordinator();
  testing::FakeWorkerServer* w = AddWorker();
  ASSERT_TRUE(WaitReady());
  // A restart behind the same registration: Steps get FAILED_PRECONDITION.
  grpc::ServerContext ctx;
  proto::DrainResponse d;
  ASSERT_TRUE(w->worker().Drain(&ctx, nullptr, &d).ok());
  const int64_t lost = Submit(Prompt(5), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(lost));
  ExpectWorkerLost(lost);
  const int64_t next = Submit(Prompt(5), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(next));
  EXPECT_EQ(events_.Get(next).tokens, Expected(Prompt(5), 4));
  EXPECT_EQ(w->worker().loads(), 2);
}

TEST_F(StepDriverFailureTest, UnavailableLoadIsRetried) {
  StartCoordinator();
  const int64_t id = Submit(Prompt(5), Greedy(3));
  testing::FakeWorkerServer* w =
      AddWorker({kVocab}, [](testing::FakeWorker& f) {
        f.FailLoads(2, absl::UnavailableError("cpu_worker not attached"));
      });
  ASSERT_TRUE(events_.WaitDone(id));
  EXPECT_EQ(events_.Get(id).tokens, Expected(Prompt(5), 3));
  EXPECT_EQ(w->worker().loads(), 1);
  EXPECT_EQ(w->worker().load_calls(), 3);
}

TEST_F(StepDriverFailureTest, PermanentLoadFailureFailsWaitingUntilNewWorker) {
  StartCoordinator();
  const int64_t first = Submit(Prompt(5), Greedy(3));
  AddWorker({kVocab}, [](testing::FakeWorker& f) {
    f.FailLoads(1, absl::NotFoundError("no such model"));
  });
  ASSERT_TRUE(events_.WaitDone(first));
  const RequestLog log = events_.Get(first);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kError);
  EXPECT_EQ(log.last().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(log.last().status.message(), "no such model"))
      << log.last().status;
  GenerationRequest r;
  r.prompt_ids = Prompt(5);
  EXPECT_EQ(driver_->Submit(r, events_.Callback()).status().code(),
            absl::StatusCode::kUnavailable);
  // Another gpu_worker: served again.
  AddWorker();
  ASSERT_TRUE(WaitReady());
  const int64_t next = Submit(Prompt(5), Greedy(3));
  ASSERT_TRUE(events_.WaitDone(next));
  EXPECT_EQ(events_.Get(next).tokens, Expected(Prompt(5), 3));
}

TEST_F(StepDriverFailureTest, StopFinishesEveryRequest) {
  StartCoordinator();
  const int64_t a = Submit(Prompt(5), Greedy(3));
  const int64_t b = Submit(Prompt(6), Greedy(3));
  driver_->Stop();
  for (int64_t id : {a, b}) {
    const RequestLog log = events_.Get(id);
    ASSERT_TRUE(log.done());
    EXPECT_EQ(log.last().finish_reason, FinishReason::kAbort);
    EXPECT_EQ(log.last().status.code(), absl::StatusCode::kUnavailable);
  }
  GenerationRequest r;
  r.prompt_ids = Prompt(5);
  EXPECT_EQ(driver_->Submit(r, events_.Callback()).status().code(),
            absl::StatusCode::kUnavailable);
  driver_->Stop();  // idempotent
}

TEST_F(StepDriverFailureTest, OtherRanksAndCpuWorkersAreNotDriven) {
  StartCoordinator();
  auto rank1 = testing::FakeWorkerServer::Start({kVocab});
  ASSERT_NE(rank1, nullptr);
  ASSERT_TRUE(rank1->RegisterWith(registry_address_, /*rank=*/1).ok());
  const int64_t id = Submit(Prompt(5), Greedy(2));
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(rank1->worker().loads(), 0);
  EXPECT_FALSE(events_.Get(id).done());
  AddWorker();
  ASSERT_TRUE(events_.WaitDone(id));
  rank1->Kill();
}

}  // namespace
}  // namespace tandem::coord
