#include "common/experts/expert_score_cache.h"

#include <vector>

#include "gtest/gtest.h"

namespace tandem::experts {
namespace {

TEST(ExpertScoreCache, ScoresAdmissionEvictionAndPrefetch) {
  auto made = ExpertScoreCache::Create(/*layers=*/2, /*experts=*/4,
                                       /*capacity=*/2, /*alpha=*/0.5);
  ASSERT_TRUE(made.ok()) << made.status();
  ExpertScoreCache& cache = *made;

  // S <- 0.5·score + 0.5·S, from 0:
  //   step 1 {1.0, 0, 0.5, 0} -> {0.5, 0, 0.25, 0}
  //   step 2 {0, 0.8, 0.5, 0} -> {0.25, 0.4, 0.375, 0}
  ASSERT_TRUE(cache.Update(0, {1.0, 0.0, 0.5, 0.0}).ok());
  ASSERT_TRUE(cache.Update(0, {0.0, 0.8, 0.5, 0.0}).ok());
  EXPECT_DOUBLE_EQ(cache.score(0, 0), 0.25);
  EXPECT_DOUBLE_EQ(cache.score(0, 1), 0.4);
  EXPECT_DOUBLE_EQ(cache.score(0, 2), 0.375);
  EXPECT_DOUBLE_EQ(cache.score(0, 3), 0.0);
  EXPECT_DOUBLE_EQ(cache.score(1, 0), 0.0);  // layers are separate

  // Room for two: e0 and e2 go in.
  auto a = cache.Admit(0, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->admitted);
  EXPECT_FALSE(a->evicted.has_value());
  ASSERT_TRUE(cache.Admit(0, 2).ok());
  EXPECT_EQ(cache.size(0), 2);

  // Full: e1 (0.4) displaces the lowest resident, e0 (0.25).
  a = cache.Admit(0, 1);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->admitted);
  ASSERT_TRUE(a->evicted.has_value());
  EXPECT_EQ(*a->evicted, 0);
  EXPECT_EQ(cache.Cached(0), (std::vector<int>{1, 2}));

  // e3 (0) does not beat e2 (0.375): it is not kept.
  a = cache.Admit(0, 3);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->admitted);
  EXPECT_EQ(cache.Cached(0), (std::vector<int>{1, 2}));

  // Prefetch the best non-resident: e0 (0.25) before e3 (0).
  auto pf = cache.PrefetchCandidates(0, 1);
  ASSERT_TRUE(pf.ok());
  EXPECT_EQ(*pf, (std::vector<int>{0}));
  pf = cache.PrefetchCandidates(0, 5);
  ASSERT_TRUE(pf.ok());
  EXPECT_EQ(*pf, (std::vector<int>{0, 3}));

  // A step that routes nothing halves every score: {0.125, 0.2, 0.1875, 0}.
  ASSERT_TRUE(cache.Update(0, {0, 0, 0, 0}).ok());
  EXPECT_DOUBLE_EQ(cache.score(0, 1), 0.2);
  EXPECT_DOUBLE_EQ(cache.score(0, 2), 0.1875);

  // Evict drops the lowest resident: e2 (0.1875) before e1 (0.2).
  auto ev = cache.Evict(0);
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(ev->has_value());
  EXPECT_EQ(**ev, 2);
  EXPECT_EQ(cache.Cached(0), (std::vector<int>{1}));
  ev = cache.Evict(1);  // nothing resident in layer 1
  ASSERT_TRUE(ev.ok());
  EXPECT_FALSE(ev->has_value());
}

TEST(ExpertScoreCache, TiesKeepTheResidentAndPreferLowIndices) {
  auto made = ExpertScoreCache::Create(1, 3, 1, 0.5);
  ASSERT_TRUE(made.ok());
  ExpertScoreCache& cache = *made;
  ASSERT_TRUE(cache.Update(0, {0.2, 0.2, 0.2}).ok());
  ASSERT_TRUE(cache.Admit(0, 1).ok());
  auto a = cache.Admit(0, 0);  // 0.1 is not > 0.1
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->admitted);
  EXPECT_EQ(cache.Cached(0), (std::vector<int>{1}));
  auto pf = cache.PrefetchCandidates(0, 2);
  ASSERT_TRUE(pf.ok());
  EXPECT_EQ(*pf, (std::vector<int>{0, 2}));
  // Admitting a resident again is a no-op.
  a = cache.Admit(0, 1);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->admitted);
  EXPECT_EQ(cache.size(0), 1);
}

TEST(ExpertScoreCache, ZeroCapacityKeepsNothing) {
  auto made = ExpertScoreCache::Create(1, 2, 0);
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE(made->Update(0, {1, 0}).ok());
  auto a = made->Admit(0, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->admitted);
  EXPECT_EQ(made->size(0), 0);
}

TEST(ExpertScoreCache, RejectsBadInput) {
  EXPECT_FALSE(ExpertScoreCache::Create(0, 4, 1).ok());
  EXPECT_FALSE(ExpertScoreCache::Create(2, 4, 5).ok());
  EXPECT_FALSE(ExpertScoreCache::Create(2, 4, 1, 0.0).ok());
  EXPECT_FALSE(ExpertScoreCache::Create(2, 4, 1, 1.5).ok());
  auto made = ExpertScoreCache::Create(2, 4, 1);
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(made->Update(0, {1, 2}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(made->Update(2, {1, 2, 3, 4}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(made->Update(0, {1, -2, 3, 4}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(made->Admit(0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(made->Admit(-1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(made->PrefetchCandidates(0, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(made->IsCached(9, 0));
  EXPECT_EQ(made->score(0, 9), 0);
}

}  // namespace
}  // namespace tandem::experts
