// Scheduler: preemption by recompute, pools that are too small, no deadlock.
#include <algorithm>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
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

std::vector<int32_t> Concat(std::vector<int32_t> a,
                            const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(SchedulerPreemptionTest, NewestAdmissionIsPreemptedAndRecomputed) {
  // 4 blocks of 2 tokens. a and b take 2 blocks each for their 3-token prompts.
  auto s = Make(Config(2, 4, 0, 16, 4, 64));
  const int64_t a = Add(*s, 3, /*max_tokens=*/4);
  const int64_t b = Add(*s, 3);
  Step(*s, 50);  // prefill both: 4 tokens each
  Step(*s, 51);  // decode both into their second block: 5 tokens each
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 4);
  const int64_t c = Add(*s, 1);

  // a's next decode (position 4) needs a third block: b, the newest, goes.
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(a));
  EXPECT_THAT(p.preempted, ElementsAre(b));
  EXPECT_EQ(s->num_preemptions(), 1);
  const Request* rb = s->GetRequest(b);
  EXPECT_EQ(rb->status(), RequestStatus::kPreempted);
  EXPECT_EQ(rb->num_computed_tokens(), 0);
  EXPECT_THAT(rb->output_token_ids(), ElementsAre(50, 51));  // kept
  EXPECT_EQ(rb->num_preemptions(), 1);
  // Back at the front of the queue, ahead of c; no admission in this step
  // although c's single block is free.
  EXPECT_THAT(s->waiting_ids(), ElementsAre(b, c));
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 3);
  Complete(*s, p, 52);

  // b needs 3 blocks, 1 is free: it waits, and c waits behind it (FCFS).
  p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(a));
  EXPECT_THAT(s->waiting_ids(), ElementsAre(b, c));
  EXPECT_EQ(Complete(*s, p, 53)[0].finished,
            FinishReason::kLength);  // a: 4 tokens

  // b re-prefills prompt + generated and samples its third token.
  p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(b, c));
  const ScheduledChunk* cb = ChunkOf(p, b);
  EXPECT_EQ(cb->start_pos, 0);
  EXPECT_EQ(cb->tokens, Concat(Prompt(3), {50, 51}));
  EXPECT_TRUE(cb->sample);
  Complete(*s, p, 54);
  EXPECT_THAT(s->GetRequest(b)->output_token_ids(), ElementsAre(50, 51, 54));
}

TEST(SchedulerPreemptionTest, RequestPreemptsItselfWhenNewest) {
  // 3 blocks of 4. a (3 tokens) fits its first block through position 3; b
  // (8 tokens) needs a third block for position 8 and is the newest.
  auto s = Make(Config(4, 3, 0, 16, 4, 64));
  const int64_t a = Add(*s, 3);
  const int64_t b = Add(*s, 8);
  Step(*s);
  StepPlan p = MustSchedule(*s);
  EXPECT_THAT(ChunkIds(p), ElementsAre(a));
  EXPECT_THAT(p.preempted, ElementsAre(b));
  EXPECT_EQ(p.num_batched_tokens, 1);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 1);
}

// Even ids on the GPU, odd ids on the CPU.
class ParityPolicy : public PlacementPolicy {
 public:
  std::optional<KvPool> ChoosePool(const Request& r,
                                   const PlacementContext& ctx) const override {
    const KvPool pool = r.id() % 2 == 0 ? KvPool::kGpu : KvPool::kCpu;
    if (ctx.blocks->num_free_blocks(pool) < ctx.blocks_now) return std::nullopt;
    return pool;
  }
};

TEST(SchedulerPreemptionTest, VictimIsNewestOnTheSamePool) {
  auto s = Make(Config(4, 2, 8, 32, 4, 64), std::make_unique<ParityPolicy>());
  const int64_t a = Add(*s, 4);  // GPU
  const int64_t b = Add(*s, 4);  // CPU
  const int64_t c = Add(*s, 4);  // GPU
  const int64_t d = Add(*s, 4);  // CPU, the newest overall
  Step(*s);
  StepPlan p = MustSchedule(*s);  // a needs a second GPU block
  EXPECT_THAT(p.preempted, ElementsAre(c));
  EXPECT_THAT(ChunkIds(p), ElementsAre(a, b, d));
  EXPECT_EQ(ChunkOf(p, b)->pool, KvPool::kCpu);
  EXPECT_EQ(s->num_running(KvPool::kCpu), 2);
}

TEST(SchedulerPreemptionTest,
     OutgrownGpuRequestMovesToCpuThenErrorsPastEveryPool) {
  // GPU holds 12 tokens, CPU 32. The request starts on the GPU.
  auto s = Make(Config(4, 3, 8, 64, 4, 64));
  const int64_t a = Add(*s, 4, /*max_tokens=*/std::nullopt);
  StepPlan p = MustSchedule(*s);
  EXPECT_EQ(ChunkOf(p, a)->pool, KvPool::kGpu);
  Complete(*s, p);
  for (int i = 0; i < 8; ++i) Step(*s);  // decodes through 13 tokens
  EXPECT_EQ(s->GetRequest(a)->num_tokens(), 13);
  p = MustSchedule(*s);  // position 12 does not fit 3 blocks
  EXPECT_TRUE(p.empty());
  EXPECT_THAT(p.preempted, ElementsAre(a));
  p = MustSchedule(*s);
  const ScheduledChunk* c = ChunkOf(p, a);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->pool, KvPool::kCpu);
  EXPECT_EQ(c->start_pos, 0);
  EXPECT_EQ(c->tokens.size(), 13u);
  Complete(*s, p);
  // It now grows until 33 tokens fit no pool.
  std::vector<FinishedRequest> finished;
  for (int i = 0; i < 40 && finished.empty(); ++i) finished = Step(*s).finished;
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].reason, FinishReason::kError);
  EXPECT_THAT(finished[0].message, ::testing::HasSubstr("outgrew"));
  EXPECT_EQ(s->num_unfinished(), 0);
  EXPECT_EQ(s->num_used_blocks(KvPool::kCpu), 0);
}

TEST(SchedulerPreemptionTest, SequenceOutgrowingTheOnlyPoolFinishesWithError) {
  auto s = Make(Config(4, 2, 0, 16, 4, 64));  // 8 tokens of KV
  const int64_t a = Add(*s, 3, std::nullopt);
  int64_t steps = 0;
  StepPlan p;
  do {
    p = Step(*s);
    ++steps;
  } while (p.finished.empty() && steps < 50);
  ASSERT_THAT(FinishedIds(p), ElementsAre(a));
  EXPECT_EQ(p.finished[0].reason, FinishReason::kError);
  EXPECT_EQ(steps,
            7);  // prefill, 5 decodes (tokens 4..8 fit), then 9 tokens do not
}

TEST(SchedulerPreemptionTest, ManyRequestsOnATinyPoolAllFinish) {
  // 6 blocks of 4 tokens; each request grows to 14 tokens (4 blocks).
  auto s = Make(Config(4, 6, 0, 16, 8, 64));
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(Add(*s, 4, /*max_tokens=*/10));
  std::vector<int64_t> finished;
  for (int step = 0; step < 500 && s->num_unfinished() > 0; ++step) {
    const StepPlan p = Step(*s);
    for (const FinishedRequest& f : p.finished) {
      EXPECT_EQ(f.reason, FinishReason::kLength);
      finished.push_back(f.request_id);
    }
  }
  for (int64_t id : FinishedIds(MustSchedule(*s))) finished.push_back(id);
  std::sort(finished.begin(), finished.end());
  EXPECT_EQ(finished, ids);  // each exactly once
  EXPECT_EQ(s->num_unfinished(), 0);
  EXPECT_GT(s->num_preemptions(), 0);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 0);
  EXPECT_THAT(s->waiting_ids(), IsEmpty());
}

}  // namespace
}  // namespace tandem::sched
