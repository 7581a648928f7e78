// Tensor parallelism in the step driver: a group of one fake gpu_worker per
// rank is loaded with the group's communicator id and stepped in lockstep;
// an incomplete group serves nothing; a rank failing alone loses (and
// reloads) the whole group; bad configurations are refused.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "coordinator/service/step_driver.h"
#include "coordinator/service/testing/driver_fixture.h"
#include "gtest/gtest.h"

namespace tandem::coord {
namespace {

class StepDriverTensorParallelTest : public testing::DriverFixture {
 protected:
  static StepDriverConfig TpConfig(int32_t ranks) {
    StepDriverConfig c = BaseConfig();
    c.tensor_parallel = ranks;
    c.tp_group_prefix = "/tandem-test-tp";
    return c;
  }
  // `setup` runs on the worker before it registers, so before its group
  // can form and load.
  testing::FakeWorkerServer* AddRank(
      int32_t rank, const std::function<void(testing::FakeWorker&)>& setup = {}) {
    auto w = testing::FakeWorkerServer::Start({kVocab});
    EXPECT_NE(w, nullptr);
    if (w == nullptr) return nullptr;
    if (setup) setup(w->worker());
    EXPECT_TRUE(w->RegisterWith(registry_address_, rank).ok());
    workers_.push_back(std::move(w));
    return workers_.back().get();
  }
};

TEST_F(StepDriverTensorParallelTest, EveryRankLoadsTheGroupAndRunsEveryStep) {
  StartCoordinator(TpConfig(3));
  testing::FakeWorkerServer* r2 = AddRank(2);
  testing::FakeWorkerServer* r1 = AddRank(1);
  const std::vector<int32_t> prompt = Prompt(6, 300);
  const int64_t id = Submit(prompt, Greedy(12));
  // Ranks 1 and 2 alone are no group: nothing loads, nothing runs.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(r1->worker().load_calls(), 0);
  EXPECT_EQ(r2->worker().load_calls(), 0);
  EXPECT_FALSE(driver_->ready());
  testing::FakeWorkerServer* r0 = AddRank(0);
  ASSERT_TRUE(events_.WaitDone(id));
  EXPECT_EQ(events_.Get(id).tokens, Expected(prompt, 12));

  std::string group;
  for (int32_t rank = 0; rank < 3; ++rank) {
    testing::FakeWorkerServer* w = rank == 0 ? r0 : rank == 1 ? r1 : r2;
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_EQ(w->worker().loads(), 1);
    const proto::LoadModelRequest load = w->worker().last_load();
    EXPECT_EQ(load.tensor_parallel().rank(), rank);
    EXPECT_EQ(load.tensor_parallel().size(), 3);
    EXPECT_TRUE(absl::StartsWith(load.tensor_parallel().group_id(), "/tandem-test-tp-"));
    if (rank == 0) group = load.tensor_parallel().group_id();
    EXPECT_EQ(load.tensor_parallel().group_id(), group) << "one group for all ranks";
    // The same plans, in the same order.
    const std::vector<proto::StepPlan> plans = w->worker().plans();
    const std::vector<proto::StepPlan> want = r0->worker().plans();
    ASSERT_EQ(plans.size(), want.size());
    for (size_t i = 0; i < plans.size(); ++i) {
      EXPECT_EQ(plans[i].SerializeAsString(), want[i].SerializeAsString()) << "step " << i;
    }
  }
}

// A rank 0 whose device names its groups (a GPU's NCCL id) is asked first,
// and every rank loads with its id, bytes as given.
TEST_F(StepDriverTensorParallelTest, RankZerosDeviceNamesTheGroup) {
  StartCoordinator(TpConfig(2));
  const std::string nccl_id("\x00\x01\xfe\xff nccl", 10);
  // Rank 1 would answer too, but only rank 0 is asked.
  testing::FakeWorkerServer* r1 =
      AddRank(1, [](testing::FakeWorker& w) { w.SetGroupId("rank 1 is not asked"); });
  testing::FakeWorkerServer* r0 =
      AddRank(0, [&](testing::FakeWorker& w) { w.SetGroupId(nccl_id); });
  const std::vector<int32_t> prompt = Prompt(4, 50);
  const int64_t id = Submit(prompt, Greedy(6));
  ASSERT_TRUE(events_.WaitDone(id));
  EXPECT_EQ(events_.Get(id).tokens, Expected(prompt, 6));
  EXPECT_EQ(r0->worker().group_id_calls(), 1);
  EXPECT_EQ(r1->worker().group_id_calls(), 0);
  for (testing::FakeWorkerServer* w : {r0, r1}) {
    EXPECT_EQ(w->worker().last_load().tensor_parallel().group_id(), nccl_id);
  }
}

// A rank 0 that cannot make an id: the group still loads, under the
// coordinator's name (the rank's device then reports what it lacks).
TEST_F(StepDriverTensorParallelTest, AFailedGroupIdFallsBackToTheCoordinatorsName) {
  StartCoordinator(TpConfig(2));
  testing::FakeWorkerServer* r0 = AddRank(0, [](testing::FakeWorker& w) {
    w.SetGroupId("", absl::InternalError("ncclGetUniqueId failed"));
  });
  testing::FakeWorkerServer* r1 = AddRank(1);
  ASSERT_TRUE(WaitReady());
  EXPECT_EQ(r0->worker().group_id_calls(), 1);
  for (testing::FakeWorkerServer* w : {r0, r1}) {
    EXPECT_TRUE(absl::StartsWith(w->worker().last_load().tensor_parallel().group_id(),
                                 "/tandem-test-tp-"));
  }
}

TEST_F(StepDriverTensorParallelTest, ARankFailingAloneLosesAndReloadsTheGroup) {
  StartCoordinator(TpConfig(2));
  testing::FakeWorkerServer* r0 = AddRank(0);
  testing::FakeWorkerServer* r1 = AddRank(1);
  ASSERT_TRUE(WaitReady());
  // An error rank 0 does not share: the group's KV can no longer agree.
  r1->worker().FailSteps(1, absl::InvalidArgumentError("rank 1 refuses"));
  const int64_t lost = Submit(Prompt(5, 100), Greedy(8));
  ASSERT_TRUE(events_.WaitDone(lost));
  const testing::RequestLog log = events_.Get(lost);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kError);
  EXPECT_EQ(log.last().status.code(), absl::StatusCode::kUnavailable) << log.last().status;
  EXPECT_TRUE(absl::StrContains(log.last().status.message(), "rank 1")) << log.last().status;
  // Both ranks are loaded again (a fresh group) and serve the next request.
  ASSERT_TRUE(r0->worker().WaitLoads(2, absl::Seconds(10)));
  ASSERT_TRUE(r1->worker().WaitLoads(2, absl::Seconds(10)));
  const std::vector<int32_t> prompt = Prompt(5, 200);
  const int64_t ok = Submit(prompt, Greedy(8));
  ASSERT_TRUE(events_.WaitDone(ok));
  EXPECT_EQ(events_.Get(ok).tokens, Expected(prompt, 8));
}

// A rank restarted after a crash registers again before the registry has
// declared the old one dead: the retried load goes to the new one.
TEST_F(StepDriverTensorParallelTest, ARestartedRankIsUsedBeforeTheOldOneIsDeclaredDead) {
  StartCoordinator(TpConfig(2), /*dead_after=*/absl::Seconds(60));
  testing::FakeWorkerServer* r0 = AddRank(0);
  testing::FakeWorkerServer* r1 = AddRank(1);
  ASSERT_TRUE(WaitReady());
  r1->Kill();
  testing::FakeWorkerServer* r1b = AddRank(1);
  // The request that meets the dead rank fails (it cannot resume); the next
  // one is served by the group with the new rank 1.
  const int64_t lost = Submit(Prompt(5, 300), Greedy(6));
  ASSERT_TRUE(events_.WaitDone(lost));
  const std::vector<int32_t> prompt = Prompt(5, 400);
  const auto start = absl::Now();
  const int64_t id = Submit(prompt, Greedy(6));
  ASSERT_TRUE(events_.WaitDone(id));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(events_.Get(id).tokens, Expected(prompt, 6)) << events_.Get(id).last().status;
  EXPECT_GE(r1b->worker().loads(), 1);
  EXPECT_GE(r0->worker().loads(), 2);
}

TEST_F(StepDriverTensorParallelTest, ABadPlanOnEveryRankFailsOnlyItsRequests) {
  StartCoordinator(TpConfig(2));
  testing::FakeWorkerServer* r0 = AddRank(0);
  testing::FakeWorkerServer* r1 = AddRank(1);
  ASSERT_TRUE(WaitReady());
  r0->worker().FailSteps(1, absl::InvalidArgumentError("bad plan"));
  r1->worker().FailSteps(1, absl::InvalidArgumentError("bad plan"));
  const int64_t failed = Submit(Prompt(5, 100), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(failed));
  EXPECT_EQ(events_.Get(failed).last().status.code(), absl::StatusCode::kInvalidArgument);
  const int64_t ok = Submit(Prompt(5, 200), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(ok));
  EXPECT_TRUE(events_.Get(ok).last().status.ok());
  EXPECT_EQ(r0->worker().loads(), 1) << "no reload for a bad plan";
  EXPECT_EQ(r1->worker().loads(), 1);
}

TEST_F(StepDriverTensorParallelTest, ARankThatCannotLoadCancelsTheOthersAndIsReported) {
  StartCoordinator(TpConfig(2));
  // Rank 0 would wait for its peer forever.
  AddRank(0, [](testing::FakeWorker& w) { w.HoldLoads(true); });
  AddRank(1, [](testing::FakeWorker& w) {
    w.FailLoads(1, absl::InvalidArgumentError("model does not split over 2 ranks"));
  });
  const auto start = absl::Now();
  const int64_t id = Submit(Prompt(5, 100), Greedy(4));
  ASSERT_TRUE(events_.WaitDone(id));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "rank 0's load was cancelled, not awaited";
  const testing::RequestLog log = events_.Get(id);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kError);
  EXPECT_TRUE(absl::StrContains(log.last().status.message(), "does not split"))
      << log.last().status;
  EXPECT_TRUE(absl::StrContains(log.last().status.message(), "rank 1")) << log.last().status;
}

TEST_F(StepDriverTensorParallelTest, BadConfigurationsAreRefused) {
  StepDriverConfig c = BaseConfig();
  c.tensor_parallel = 0;
  EXPECT_EQ(StepDriver::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.tensor_parallel = 65;
  EXPECT_EQ(StepDriver::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.tensor_parallel = 2;  // no group prefix
  EXPECT_EQ(StepDriver::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.tp_group_prefix = "/tandem-test-tp";
  c.model.cpu_experts = {{0, 1}};
  c.model.data_segment = "/tandem-test-rings";
  EXPECT_EQ(StepDriver::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.model.cpu_experts.clear();
  auto ok = StepDriver::Create(c);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

}  // namespace
}  // namespace tandem::coord
