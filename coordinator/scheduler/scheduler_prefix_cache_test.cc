// Prefix caching in the block manager and the scheduler: hits, sharing,
// eviction, and a randomized run against a model of the workers' KV that
// checks every shared position holds the KV of exactly the right prefix.
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "coordinator/scheduler/scheduler_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

using testing::Complete;
using testing::Config;
using ::testing::ElementsAre;
using testing::Make;
using testing::MustSchedule;

SchedulerConfig CachingConfig(int64_t block_size, int64_t gpu_blocks, int64_t budget = 64) {
  SchedulerConfig c = Config(block_size, gpu_blocks, 0, budget, 8, 256);
  c.enable_prefix_caching = true;
  return c;
}

int64_t AddTokens(Scheduler& s, std::vector<int32_t> prompt, int64_t max_tokens = 3) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  auto id = s.AddRequest(std::move(prompt), p);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : -1;
}

// Runs steps until `id` has finished.
void RunToEnd(Scheduler& s, int64_t id) {
  for (int i = 0; i < 100 && s.GetRequest(id) != nullptr; ++i) {
    StepPlan plan = MustSchedule(s);
    ASSERT_FALSE(plan.empty());
    Complete(s, plan, /*token=*/9);
  }
  ASSERT_EQ(s.GetRequest(id), nullptr);
}

TEST(SchedulerPrefixCacheTest, ARepeatedPromptSkipsItsCachedFullBlocks) {
  auto s = Make(CachingConfig(4, 16));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const int64_t a = AddTokens(*s, prompt);
  StepPlan first = MustSchedule(*s);
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_EQ(first.chunks[0].start_pos, 0);
  EXPECT_EQ(first.chunks[0].shared_prefix_tokens, 0);
  const std::vector<int32_t> a_table = first.chunks[0].block_table;
  Complete(*s, first, 9);
  RunToEnd(*s, a);
  EXPECT_EQ(s->block_manager().num_cached_blocks(KvPool::kGpu), 3);  // 12 of 13 tokens

  const int64_t b = AddTokens(*s, prompt);
  StepPlan second = MustSchedule(*s);
  ASSERT_EQ(second.chunks.size(), 1u);
  const ScheduledChunk& c = second.chunks[0];
  // Two full prompt blocks are shared; the rest runs, the last token too.
  EXPECT_EQ(c.start_pos, 8);
  EXPECT_EQ(c.shared_prefix_tokens, 8);
  EXPECT_THAT(c.tokens, ElementsAre(9, 10));
  EXPECT_EQ(c.block_table[0], a_table[0]);
  EXPECT_EQ(c.block_table[1], a_table[1]);
  EXPECT_EQ(s->GetRequest(b)->num_cached_prompt_tokens(), 8);
  EXPECT_EQ(s->num_prefix_cache_queries(), 20);
  EXPECT_EQ(s->num_prefix_cache_hits(), 8);
}

TEST(SchedulerPrefixCacheTest, APromptOfWholeBlocksStillRunsItsLastBlock) {
  auto s = Make(CachingConfig(4, 16));
  const int64_t a = AddTokens(*s, {1, 2, 3, 4, 5, 6, 7, 8});
  RunToEnd(*s, a);
  AddTokens(*s, {1, 2, 3, 4, 5, 6, 7, 8});
  StepPlan plan = MustSchedule(*s);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].start_pos, 4);
  EXPECT_THAT(plan.chunks[0].tokens, ElementsAre(5, 6, 7, 8));
  // The second block is written again, so it is a fresh one.
  EXPECT_EQ(plan.chunks[0].block_table.size(), 2u);
}

TEST(SchedulerPrefixCacheTest, RunningRequestsShareBlocksTheyBothHold) {
  auto s = Make(CachingConfig(4, 16));
  const int64_t a = AddTokens(*s, {1, 2, 3, 4, 5, 6}, /*max_tokens=*/10);
  Complete(*s, MustSchedule(*s), 9);  // a's first block is indexed now
  const int64_t b = AddTokens(*s, {1, 2, 3, 4, 7, 7});
  StepPlan plan = MustSchedule(*s);
  const ScheduledChunk* cb = testing::ChunkOf(plan, b);
  ASSERT_NE(cb, nullptr);
  EXPECT_EQ(cb->shared_prefix_tokens, 4);
  EXPECT_EQ(cb->block_table[0], s->block_manager().BlockTable(a)[0]);
  // One block held twice: 2 (a) + 1 fresh (b) in use.
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 3);
  Complete(*s, plan, 9);
  ASSERT_TRUE(s->Abort(a).ok());
  EXPECT_TRUE(s->CheckInvariants().ok());
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 2);  // b keeps the shared block
}

TEST(SchedulerPrefixCacheTest, IdleCachedBlocksAreTakenBackWhenThePoolRunsOut) {
  auto s = Make(CachingConfig(4, 4));
  const int64_t a = AddTokens(*s, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 2);
  RunToEnd(*s, a);
  EXPECT_EQ(s->block_manager().num_cached_blocks(KvPool::kGpu), 2);
  EXPECT_EQ(s->num_used_blocks(KvPool::kGpu), 0);  // idle cached blocks count as free
  // A request of other tokens that needs the whole pool evicts them.
  const int64_t b = AddTokens(*s, {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33}, 2);
  RunToEnd(*s, b);
  EXPECT_EQ(s->GetRequest(b), nullptr);
  auto c = AddTokens(*s, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  StepPlan plan = MustSchedule(*s);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].request_id, c);
  EXPECT_EQ(plan.chunks[0].start_pos, 0);  // evicted: computed again
}

TEST(SchedulerPrefixCacheTest, APreemptedRequestFindsItsOwnKvAgain) {
  // Two requests that outgrow a pool of 6 blocks: the newer is preempted,
  // and on its return its full blocks are still cached.
  auto s = Make(CachingConfig(4, 6));
  const int64_t a = AddTokens(*s, {1, 2, 3, 4, 5, 6, 7, 8}, 12);
  const int64_t b = AddTokens(*s, {11, 12, 13, 14, 15, 16, 17, 18}, 12);
  bool preempted = false;
  for (int i = 0; i < 40 && !preempted; ++i) {
    StepPlan plan = MustSchedule(*s);
    preempted = !plan.preempted.empty();
    if (!plan.empty()) Complete(*s, plan, 9);
  }
  ASSERT_TRUE(preempted);
  (void)a;
  for (int i = 0; i < 60 && s->GetRequest(b) != nullptr; ++i) {
    StepPlan plan = MustSchedule(*s);
    const ScheduledChunk* cb = testing::ChunkOf(plan, b);
    if (cb != nullptr && cb->shared_prefix_tokens > 0) {
      // a's growth took back b's idle blocks tail first (the LRU order of a
      // freed table); its first block survived.
      EXPECT_EQ(cb->start_pos, cb->shared_prefix_tokens);
      EXPECT_GE(cb->start_pos, 4);
      return;
    }
    if (!plan.empty()) Complete(*s, plan, 9);
  }
  ADD_FAILURE() << "the preempted request never came back with a cache hit";
}

TEST(SchedulerPrefixCacheTest, ResetForgetsEverything) {
  auto s = Make(CachingConfig(4, 16));
  const int64_t a = AddTokens(*s, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  RunToEnd(*s, a);
  s->ResetPrefixCache();
  EXPECT_EQ(s->block_manager().num_cached_blocks(KvPool::kGpu), 0);
  EXPECT_TRUE(s->CheckInvariants().ok());
  AddTokens(*s, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(MustSchedule(*s).chunks[0].start_pos, 0);
}

TEST(SchedulerPrefixCacheTest, OffByDefaultAndNeverOnTheCpuPool) {
  auto off = Make(Config(4, 16, 0, 64, 8, 256));
  const int64_t a = AddTokens(*off, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  RunToEnd(*off, a);
  AddTokens(*off, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(MustSchedule(*off).chunks[0].start_pos, 0);

  SchedulerConfig c = Config(4, 0, 16, 64, 8, 256);  // CPU pool only
  c.enable_prefix_caching = true;
  auto cpu = Make(c);
  const int64_t b = AddTokens(*cpu, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  RunToEnd(*cpu, b);
  AddTokens(*cpu, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(MustSchedule(*cpu).chunks[0].start_pos, 0);
  EXPECT_EQ(cpu->num_prefix_cache_queries(), 0);
}

// A model of the workers' KV: each slot holds the tokens its KV was computed
// from (everything up to and including its position). A chunk reads the
// slots of its first start_pos positions through its table and must find
// exactly its own prefix there; it then writes its own positions.
class KvModel {
 public:
  explicit KvModel(int64_t block_size) : bs_(block_size) {}
  void Run(const ScheduledChunk& c, const std::vector<int32_t>& all_tokens) {
    for (int64_t p = 0; p < c.start_pos; ++p) {
      const auto& slot = slots_[{c.block_table[static_cast<size_t>(p / bs_)], p % bs_}];
      const std::vector<int32_t> want(all_tokens.begin(), all_tokens.begin() + p + 1);
      ASSERT_EQ(slot, want) << "request " << c.request_id << " position " << p << " block "
                            << c.block_table[static_cast<size_t>(p / bs_)];
    }
    for (int64_t i = 0; i < static_cast<int64_t>(c.tokens.size()); ++i) {
      const int64_t p = c.start_pos + i;
      slots_[{c.block_table[static_cast<size_t>(p / bs_)], p % bs_}] =
          std::vector<int32_t>(all_tokens.begin(), all_tokens.begin() + p + 1);
    }
  }

 private:
  int64_t bs_;
  std::map<std::pair<int32_t, int64_t>, std::vector<int32_t>> slots_;
};

TEST(SchedulerPrefixCacheTest, RandomTrafficNeverReadsAnotherPrefixsKv) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  constexpr int64_t kBlock = 4;
  auto s = Make(CachingConfig(kBlock, 24, /*budget=*/24));
  KvModel kv(kBlock);
  // A few shared openings (system prompts) of different lengths.
  std::vector<std::vector<int32_t>> openings;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> o(static_cast<size_t>(3 + rng() % 14));
    for (int32_t& t : o) t = static_cast<int32_t>(1 + rng() % 5);
    openings.push_back(o);
  }
  std::vector<int64_t> live;
  int64_t hits = 0;
  for (int step = 0; step < 600; ++step) {
    if (rng() % 3 == 0 && s->num_unfinished() < 12) {
      std::vector<int32_t> p = openings[rng() % openings.size()];
      const int tail = static_cast<int>(rng() % 8);
      for (int i = 0; i < tail; ++i) p.push_back(static_cast<int32_t>(1 + rng() % 5));
      live.push_back(AddTokens(*s, p, 1 + rng() % 10));
    }
    if (!live.empty() && rng() % 17 == 0) {
      (void)s->Abort(live[rng() % live.size()]);
    }
    StepPlan plan = MustSchedule(*s);
    std::vector<SampledToken> results;
    for (const ScheduledChunk& c : plan.chunks) {
      const Request* r = s->GetRequest(c.request_id);
      ASSERT_NE(r, nullptr);
      if (c.shared_prefix_tokens > 0) ++hits;
      kv.Run(c, r->tokens(0, c.start_pos + static_cast<int64_t>(c.tokens.size())));
      if (HasFatalFailure()) return;
      if (c.sample) results.push_back({c.request_id, static_cast<int32_t>(1 + rng() % 5)});
    }
    if (!plan.empty()) {
      ASSERT_TRUE(s->OnStepResult(plan.step_id, results).ok());
      ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
    }
  }
  EXPECT_GT(hits, 10);  // the traffic did share
}

}  // namespace
}  // namespace tandem::sched
