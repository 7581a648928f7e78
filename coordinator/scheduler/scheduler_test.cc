// Scheduler rules other than preemption (scheduler_preemption_test.cc).
#include "coordinator/scheduler/scheduler.h"

#include <vector>

#include "coordinator/scheduler/scheduler_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

using ::tandem::sched::testing::Add;
using ::tandem::sched::testing::ChunkIds;
using ::tandem::sched::testing::ChunkOf;
using ::tandem::sched::testing::Complete;
using ::tandem::sched::testing::Config;
using ::tandem::sched::testing::FinishedIds;
using ::tandem::sched::testing::Make;
using ::tandem::sched::testing::MustSchedule;
using ::tandem::sched::testing::Prompt;
using ::tandem::sched::testing::Step;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SchedulerConfigTest, Validates) {
  EXPECT_TRUE(Config(16, 8, 0, 64, 8, 128).Validate().ok());
  EXPECT_FALSE(Config(0, 8, 0, 64, 8, 128).Validate().ok());
  EXPECT_FALSE(Config(16, 0, 0, 64, 8, 128).Validate().ok());  // no KV
  EXPECT_FALSE(Config(16, 8, 0, 4, 8, 128).Validate().ok());   // budget < seqs
  EXPECT_FALSE(Config(16, 8, 0, 64, 0, 128).Validate().ok());
  EXPECT_FALSE(Config(16, 8, 0, 64, 8, 1).Validate().ok());
  EXPECT_EQ(Scheduler::Create(Config(16, 8, 0, 4, 8, 128)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, AddRequestValidates) {
  auto s = Make(Config(4, 8, 0, 16, 4, 64));
  EXPECT_EQ(s->AddRequest({}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->AddRequest({1, -2}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  SamplingParams bad;
  bad.top_p = 2.0f;
  EXPECT_EQ(s->AddRequest({1}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->num_waiting(), 0);
  EXPECT_EQ(*s->AddRequest({1}, {}), 0);
  EXPECT_EQ(*s->AddRequest({1}, {}), 1);  // ids follow arrival
  EXPECT_EQ(s->num_waiting(), 2);
}

TEST(SchedulerTest, PrefillThenDecodes) {
  auto s = Make(Config(4, 8, 0, 16, 4, 64));
  const int64_t id = Add(*s, 5, /*max_tokens=*/3);
  StepPlan p = MustSchedule(*s);
  ASSERT_EQ(p.chunks.size(), 1u);
  const ScheduledChunk& c = p.chunks[0];
  EXPECT_EQ(c.request_id, id);
  EXPECT_EQ(c.tokens, Prompt(5));
  EXPECT_EQ(c.start_pos, 0);
  EXPECT_TRUE(c.sample);
  EXPECT_FALSE(c.is_decode);
  EXPECT_EQ(c.pool, KvPool::kGpu);
  EXPECT_THAT(c.block_table, ElementsAre(0, 1));
  EXPECT_EQ(c.sampling->max_tokens, 3);
  EXPECT_EQ(p.num_batched_tokens, 5);
  EXPECT_EQ(s->num_running(), 1);
  EXPECT_EQ(s->GetRequest(id)->num_computed_tokens(), 0);  // until the result

  std::vector<RequestUpdate> u = Complete(*s, p, 41);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].token, 41);
  EXPECT_EQ(u[0].finished, std::nullopt);
  EXPECT_EQ(s->GetRequest(id)->num_computed_tokens(), 5);

  p = MustSchedule(*s);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_THAT(p.chunks[0].tokens, ElementsAre(41));
  EXPECT_EQ(p.chunks[0].start_pos, 5);
  EXPECT_TRUE(p.chunks[0].is_decode);
  EXPECT_THAT(p.chunks[0].block_table, ElementsAre(0, 1));
  Complete(*s, p, 42);
  p = MustSchedule(*s);
  EXPECT_THAT(p.chunks[0].tokens, ElementsAre(42));
  u = Complete(*s, p, 43);
  EXPECT_EQ(u[0].finished, FinishReason::kLength);  // max_tokens = 3
  EXPECT_EQ(s->GetRequest(id), nullptr);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 0);  // freed at once
  p = MustSchedule(*s);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(p.step_id, -1);
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].request_id, id);
  EXPECT_EQ(p.finished[0].reason, FinishReason::kLength);
  EXPECT_EQ(s->num_finished(), 1);
  EXPECT_TRUE(MustSchedule(*s).finished.empty());  // reported once
}

TEST(SchedulerTest, ChunkedPrefillSplitsUnderBudget) {
  auto s = Make(Config(4, 16, 0, 8, 4, 64));
  const int64_t id = Add(*s, 20);
  std::vector<int64_t> sizes, starts;
  for (int i = 0; i < 3; ++i) {
    StepPlan p = MustSchedule(*s);
    ASSERT_EQ(p.chunks.size(), 1u);
    sizes.push_back(p.chunks[0].tokens.size());
    starts.push_back(p.chunks[0].start_pos);
    EXPECT_EQ(p.chunks[0].sample, i == 2);
    EXPECT_LE(p.num_batched_tokens, 8);
    EXPECT_EQ(s->block_manager().CapacityOf(id),
              4 * ((starts.back() + sizes.back() + 3) / 4));
    Complete(*s, p);
  }
  EXPECT_THAT(sizes, ElementsAre(8, 8, 4));
  EXPECT_THAT(starts, ElementsAre(0, 8, 16));
  EXPECT_THAT(s->GetRequest(id)->output_token_ids(), ElementsAre(7));
}

TEST(SchedulerTest, DecodesThenContinuingPrefillsThenAdmissions) {
  auto s = Make(Config(4, 64, 0, 12, 4, 64));
  const int64_t a = Add(*s, 2);  // prefilled in step 1, decoding in step 2
  const int64_t b =
      Add(*s, 30);  // partial in step 1 (10 tokens), continues in step 2
  Step(*s);
  const int64_t c = Add(*s, 3);  // new in step 2
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p),
              ElementsAre(a, b));  // b takes the rest of the budget
  EXPECT_EQ(ChunkOf(p, b)->tokens.size(), 11u);
  EXPECT_EQ(p.num_batched_tokens, 12);
  Complete(*s, p);
  p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(a, b, c));
  EXPECT_EQ(ChunkOf(p, b)->tokens.size(), 9u);  // 30 - 10 - 11
  EXPECT_EQ(ChunkOf(p, c)->tokens.size(), 2u);  // the budget left: 12 - 1 - 9
  EXPECT_FALSE(ChunkOf(p, c)->sample);
}

TEST(SchedulerTest, MaxNumSeqsCapsRunning) {
  auto s = Make(Config(4, 64, 0, 64, 2, 64));
  for (int i = 0; i < 5; ++i) Add(*s, 3);
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(0, 1));
  EXPECT_EQ(s->num_running(), 2);
  EXPECT_EQ(s->num_waiting(), 3);
}

TEST(SchedulerTest, AdmissionIsStrictFcfs) {
  // The head needs 4 blocks, only 3 are free: the small one behind it waits.
  auto s = Make(Config(4, 5, 0, 64, 4, 64));
  const int64_t a = Add(*s, 8);
  Step(*s);  // a holds 2 blocks (3 after its first decode is scheduled)
  const int64_t big = Add(*s, 16);
  const int64_t small = Add(*s, 1);
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(a));
  EXPECT_THAT(s->waiting_ids(), ElementsAre(big, small));
}

TEST(SchedulerTest, PromptTooLongFinishesWithError) {
  auto s = Make(Config(4, 64, 0, 64, 4, 16));
  const int64_t ok1 = Add(*s, 15);  // 15 + 1 fits the limit of 16
  const int64_t too_long = Add(*s, 16);
  const int64_t ok2 = Add(*s, 2);
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(ok1, ok2));
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].request_id, too_long);
  EXPECT_EQ(p.finished[0].reason, FinishReason::kError);
  EXPECT_THAT(p.finished[0].message, ::testing::HasSubstr("prompt too long"));
  std::vector<RequestUpdate> u = Complete(*s, p);
  EXPECT_EQ(u[0].finished, FinishReason::kLength);  // ok1 reached the limit
}

TEST(SchedulerTest, RequestLargerThanEveryPoolFinishesWithError) {
  auto s = Make(Config(4, 3, 2, 64, 4, 64));  // pools hold 12 and 8 tokens
  const int64_t big = Add(*s, 13);
  const int64_t fits =
      Add(*s, 12, /*max_tokens=*/1);  // exactly fills the GPU pool
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(FinishedIds(p), ElementsAre(big));
  EXPECT_EQ(p.finished[0].reason, FinishReason::kError);
  EXPECT_THAT(ChunkIds(p), ElementsAre(fits));
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 3);
  EXPECT_EQ(Complete(*s, p)[0].finished, FinishReason::kLength);
}

TEST(SchedulerTest, StopConditionsFinishAndFreeAtOnce) {
  SchedulerConfig c = Config(4, 64, 0, 64, 8, 64);
  c.eos_token_ids = {2};
  auto s = Make(c);
  SamplingParams eos;
  const int64_t a = *s->AddRequest({5, 6}, eos);
  SamplingParams ignore;
  ignore.ignore_eos = true;
  ignore.max_tokens = 2;
  const int64_t b = *s->AddRequest({5, 6}, ignore);
  SamplingParams stop_ids;
  stop_ids.stop_token_ids = {2};
  stop_ids.ignore_eos = true;
  const int64_t d = *s->AddRequest({5, 6}, stop_ids);
  StepPlan p = MustSchedule(*s);
  std::vector<RequestUpdate> u = Complete(*s, p, /*token=*/2);
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].request_id, a);
  EXPECT_EQ(u[0].finished, FinishReason::kStop);
  EXPECT_EQ(u[1].request_id, b);
  EXPECT_EQ(u[1].finished, std::nullopt);  // EOS ignored
  EXPECT_EQ(u[2].request_id, d);
  EXPECT_EQ(u[2].finished, FinishReason::kStop);  // stop ids still apply
  EXPECT_EQ(s->num_running(), 1);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 1);
  p = MustSchedule(*s);
  EXPECT_THAT(FinishedIds(p), ElementsAre(a, d));
  u = Complete(*s, p, 2);
  EXPECT_EQ(u[0].finished, FinishReason::kLength);
}

TEST(SchedulerTest, AbortFreesKvWhateverTheState) {
  auto s = Make(Config(4, 64, 0, 64, 8, 64));
  const int64_t running = Add(*s, 9);
  Step(*s);
  const int64_t waiting = Add(*s, 3);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 3);
  ASSERT_TRUE(s->Abort(running).ok());
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 0);
  ASSERT_TRUE(s->Abort(waiting).ok());
  EXPECT_EQ(s->num_waiting(), 0);
  EXPECT_EQ(s->num_running(), 0);
  EXPECT_EQ(s->Abort(running).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Abort(12345).code(), absl::StatusCode::kNotFound);
  StepPlan p = MustSchedule(*s);
  EXPECT_TRUE(p.empty());
  ASSERT_EQ(p.finished.size(), 2u);
  EXPECT_EQ(p.finished[0].reason, FinishReason::kAbort);
  EXPECT_EQ(p.finished[1].reason, FinishReason::kAbort);
}

TEST(SchedulerTest, AbortDuringStepIgnoresItsResult) {
  auto s = Make(Config(4, 64, 0, 64, 8, 64));
  const int64_t a = Add(*s, 4);
  const int64_t b = Add(*s, 4);
  StepPlan p = MustSchedule(*s);
  ASSERT_TRUE(s->Abort(a).ok());
  std::vector<RequestUpdate> u = Complete(*s, p);  // reports both
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].request_id, b);
  EXPECT_THAT(FinishedIds(MustSchedule(*s)), ElementsAre(a));
}

TEST(SchedulerTest, FrontendStopStringFinishesWithStop) {
  auto s = Make(Config(4, 64, 0, 64, 8, 64));
  const int64_t a = Add(*s, 4);
  Step(*s);
  ASSERT_TRUE(s->Finish(a, FinishReason::kStop).ok());
  StepPlan p = MustSchedule(*s);
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].reason, FinishReason::kStop);
  EXPECT_TRUE(p.empty());
}

TEST(SchedulerTest, OneStepInFlightAndResultsValidated) {
  auto s = Make(Config(4, 64, 0, 4, 2, 64));
  const int64_t a = Add(*s, 2);
  const int64_t b = Add(*s, 6);  // partial: 2 of 6
  StepPlan p = MustSchedule(*s);
  EXPECT_EQ(s->Schedule().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->OnStepResult(p.step_id + 1, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  using R = std::vector<SampledToken>;
  EXPECT_EQ(
      s->OnStepResult(p.step_id, R{}).status().code(),  // a's token missing
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->OnStepResult(p.step_id, R{{a, 1}, {a, 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->OnStepResult(p.step_id, R{{a, 1}, {b, 1}})
                .status()
                .code(),  // b is partial
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->OnStepResult(p.step_id, R{{a, 1}, {99, 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->OnStepResult(p.step_id, R{{a, -1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->GetRequest(a)->num_computed_tokens(), 0);  // nothing applied
  auto u = s->OnStepResult(p.step_id, R{{a, 1}, {b, std::nullopt}});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(s->GetRequest(b)->num_computed_tokens(), 2);
  EXPECT_FALSE(s->step_in_flight());
}

TEST(SchedulerTest, FailedStepIsScheduledAgain) {
  auto s = Make(Config(4, 64, 0, 64, 8, 64));
  Add(*s, 6);
  StepPlan first = MustSchedule(*s);
  EXPECT_EQ(s->OnStepFailed(first.step_id + 1).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->OnStepFailed(first.step_id).ok());
  StepPlan again = MustSchedule(*s);
  ASSERT_EQ(again.chunks.size(), 1u);
  EXPECT_EQ(again.chunks[0].tokens, first.chunks[0].tokens);
  EXPECT_EQ(again.chunks[0].start_pos, 0);
  EXPECT_EQ(again.chunks[0].block_table, first.chunks[0].block_table);
  EXPECT_NE(again.step_id, first.step_id);
}

TEST(SchedulerTest, DefaultPlacementUsesGpuThenCpu) {
  // GPU: 10 blocks of 4, watermark 95% (9.5 blocks). A placement counts the
  // whole prompt + 1 against the watermark.
  auto s = Make(Config(4, 10, 20, 64, 8, 64));
  const int64_t a = Add(*s, 20);  // 0 + 6 <= 9.5: GPU (takes 5)
  const int64_t b = Add(*s, 20);  // 5 + 6 > 9.5: CPU (takes 5)
  const int64_t c = Add(*s, 16);  // 5 + 5 > 9.5: CPU (takes 4)
  const int64_t d = Add(*s, 4);   // 5 + 2 <= 9.5: GPU (takes 1)
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(a, b, c, d));
  EXPECT_EQ(ChunkOf(p, a)->pool, KvPool::kGpu);
  EXPECT_EQ(ChunkOf(p, b)->pool, KvPool::kCpu);
  EXPECT_EQ(ChunkOf(p, c)->pool, KvPool::kCpu);
  EXPECT_EQ(ChunkOf(p, d)->pool, KvPool::kGpu);
  EXPECT_EQ(s->GetRequest(b)->kv_pool(), KvPool::kCpu);
  EXPECT_EQ(s->num_running(KvPool::kGpu), 2);
  EXPECT_EQ(s->num_running(KvPool::kCpu), 2);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 6);
  EXPECT_EQ(s->num_used_blocks(KvPool::kCpu), 9);
  EXPECT_EQ(s->num_total_blocks(KvPool::kCpu), 20);
  EXPECT_DOUBLE_EQ(s->kv_usage(KvPool::kCpu), 0.45);
  Complete(*s, p);
  p = MustSchedule(*s);
  for (const ScheduledChunk& ch : p.chunks) EXPECT_TRUE(ch.is_decode);
  EXPECT_EQ(ChunkOf(p, b)->pool, KvPool::kCpu);  // decode attention on the CPU
}

TEST(SchedulerTest, WithoutCpuPoolPlacementIsVllmAdmission) {
  auto s = Make(Config(4, 4, 0, 64, 8, 64));
  const int64_t a =
      Add(*s, 16, 1);  // all 4 blocks: over the watermark, still admitted
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(a));
  EXPECT_EQ(ChunkOf(p, a)->pool, KvPool::kGpu);
}

TEST(SchedulerTest, FixedPlacementPinsPool) {
  auto s = Make(Config(4, 16, 16, 64, 8, 64),
                std::make_unique<FixedPlacementPolicy>(KvPool::kCpu));
  const int64_t a = Add(*s, 5);
  StepPlan p = MustSchedule(*s);
  EXPECT_EQ(ChunkOf(p, a)->pool, KvPool::kCpu);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 0);
}

// A policy that never places anything: with an empty cache the request can
// never be admitted, so it is finished rather than left to block the queue.
class RefusingPolicy : public PlacementPolicy {
 public:
  std::optional<KvPool> ChoosePool(const Request&,
                                   const PlacementContext&) const override {
    return std::nullopt;
  }
};

TEST(SchedulerTest, PolicyThatCannotPlaceOnEmptyCacheDoesNotDeadlock) {
  auto s =
      Make(Config(4, 16, 0, 64, 8, 64), std::make_unique<RefusingPolicy>());
  const int64_t a = Add(*s, 5);
  StepPlan p = MustSchedule(*s);
  EXPECT_TRUE(p.empty());
  EXPECT_THAT(FinishedIds(p), ElementsAre(a));
  EXPECT_EQ(p.finished[0].reason, FinishReason::kError);
  EXPECT_THAT(s->waiting_ids(), IsEmpty());
}

}  // namespace
}  // namespace tandem::sched
