// Prefix caching through the step driver and a fake gpu_worker that keeps
// the token of every KV slot its plans' block tables name: a request that
// opens like an earlier one runs from the shared blocks, reads its context
// from them, and streams what it would have streamed computed whole; usage
// reports the cached tokens; a new worker starts with an empty cache.
#include <vector>

#include "coordinator/service/step_driver.h"
#include "coordinator/service/testing/driver_fixture.h"
#include "gtest/gtest.h"

namespace tandem::coord {
namespace {

using testing::RequestLog;

class StepDriverPrefixCacheTest : public testing::DriverFixture {
 protected:
  static StepDriverConfig CachingConfig() {
    StepDriverConfig c = BaseConfig();
    c.enable_prefix_caching = true;
    return c;
  }
  // `opening` then `tail`.
  static std::vector<int32_t> Join(std::vector<int32_t> opening, const std::vector<int32_t>& tail) {
    opening.insert(opening.end(), tail.begin(), tail.end());
    return opening;
  }
};

TEST_F(StepDriverPrefixCacheTest, ASecondRequestRunsFromTheFirstOnesBlocks) {
  StartCoordinator(CachingConfig());
  testing::FakeWorkerServer* w = AddWorker();
  const std::vector<int32_t> opening = Prompt(10, 300);  // two blocks of 4, and 2
  const std::vector<int32_t> first = Join(opening, {7, 8, 9});
  const std::vector<int32_t> second = Join(opening, {11, 12, 13, 14});

  const int64_t a = Submit(first, Greedy(6));
  ASSERT_TRUE(events_.WaitDone(a));
  RequestLog log = events_.Get(a);
  EXPECT_EQ(log.tokens, Expected(first, 6));
  EXPECT_EQ(log.last().usage.cached_prompt_tokens, 0);

  const int64_t b = Submit(second, Greedy(6));
  ASSERT_TRUE(events_.WaitDone(b));
  log = events_.Get(b);
  EXPECT_EQ(log.tokens, Expected(second, 6));  // from a context read out of the shared blocks
  EXPECT_EQ(log.last().usage.prompt_tokens, 14);
  EXPECT_EQ(log.last().usage.cached_prompt_tokens, 8);
  EXPECT_EQ(w->worker().shared_prefix_steps(), 1);

  // The same prompt again: every full block but the one holding its last
  // token comes from the cache (12 of 14 tokens).
  const int64_t c = Submit(second, Greedy(6));
  ASSERT_TRUE(events_.WaitDone(c));
  log = events_.Get(c);
  EXPECT_EQ(log.tokens, Expected(second, 6));
  EXPECT_EQ(log.last().usage.cached_prompt_tokens, 12);

  const DriverMetrics m = driver_->metrics();
  EXPECT_EQ(m.prefix_cache_queries, 13 + 14 + 14);
  EXPECT_EQ(m.prefix_cache_hits, 8 + 12);
}

TEST_F(StepDriverPrefixCacheTest, ConcurrentRequestsShareAndStayExact) {
  StartCoordinator(CachingConfig());
  testing::FakeWorkerServer* w = AddWorker();
  w->worker().SetStepDelay(absl::Milliseconds(2));
  const std::vector<int32_t> opening = Prompt(17, 500);
  const int64_t lead = Submit(Join(opening, {1}), Greedy(30));
  ASSERT_TRUE(events_.WaitEvents(lead, 2));  // its prompt blocks are indexed
  std::vector<int64_t> ids;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(Join(opening, {static_cast<int32_t>(40 + i), static_cast<int32_t>(60 + i)}));
    ids.push_back(Submit(prompts.back(), Greedy(12)));
  }
  ASSERT_TRUE(events_.WaitAllDone(ids));
  ASSERT_TRUE(events_.WaitDone(lead));
  EXPECT_EQ(events_.Get(lead).tokens, Expected(Join(opening, {1}), 30));
  for (size_t i = 0; i < ids.size(); ++i) {
    const RequestLog log = events_.Get(ids[i]);
    EXPECT_EQ(log.tokens, Expected(prompts[i], 12)) << i;
    EXPECT_EQ(log.last().usage.cached_prompt_tokens, 16) << i;
  }
  EXPECT_GE(w->worker().shared_prefix_steps(), 5);
}

TEST_F(StepDriverPrefixCacheTest, ANewWorkerStartsWithAnEmptyCache) {
  StartCoordinator(CachingConfig());
  testing::FakeWorkerServer* a = AddWorker();
  const std::vector<int32_t> prompt = Prompt(13, 200);
  const int64_t first = Submit(prompt, Greedy(3));
  ASSERT_TRUE(events_.WaitDone(first));
  a->Kill();
  // The next request finds the worker dead, waits for another, and runs
  // whole there: the KV of the cached blocks was on the dead one.
  absl::SleepFor(absl::Milliseconds(1500));
  testing::FakeWorkerServer* b = AddWorker();
  const int64_t second = Submit(prompt, Greedy(3));
  ASSERT_TRUE(events_.WaitDone(second, absl::Seconds(20)));
  const RequestLog log = events_.Get(second);
  ASSERT_TRUE(log.last().status.ok()) << log.last().status;
  EXPECT_EQ(log.tokens, Expected(prompt, 3));
  EXPECT_EQ(log.last().usage.cached_prompt_tokens, 0);
  EXPECT_EQ(b->worker().shared_prefix_steps(), 0);
}

TEST_F(StepDriverPrefixCacheTest, OffReportsNoCachedTokens) {
  StartCoordinator();  // BaseConfig: prefix caching off
  testing::FakeWorkerServer* w = AddWorker();
  const std::vector<int32_t> prompt = Prompt(13, 200);
  for (int i = 0; i < 2; ++i) {
    const int64_t id = Submit(prompt, Greedy(3));
    ASSERT_TRUE(events_.WaitDone(id));
    EXPECT_EQ(events_.Get(id).last().usage.cached_prompt_tokens, -1);
  }
  EXPECT_EQ(w->worker().shared_prefix_steps(), 0);
}

}  // namespace
}  // namespace tandem::coord
