#include "coordinator/scheduler/prefix_cache.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

using ::testing::ElementsAre;

TEST(PrefixCacheTest, FindsABlockByItsParentAndTokens) {
  PrefixCache c(8);
  const uint64_t a = c.Insert(3, PrefixCache::kRoot, {1, 2, 3, 4});
  const uint64_t b = c.Insert(5, a, {5, 6, 7, 8});
  EXPECT_NE(a, PrefixCache::kRoot);
  EXPECT_NE(a, b);
  EXPECT_EQ(c.Find(PrefixCache::kRoot, {1, 2, 3, 4}), 3);
  EXPECT_EQ(c.Find(a, {5, 6, 7, 8}), 5);
  // The same tokens after another parent, or other tokens: not found.
  EXPECT_EQ(c.Find(PrefixCache::kRoot, {5, 6, 7, 8}), -1);
  EXPECT_EQ(c.Find(a, {5, 6, 7, 9}), -1);
  EXPECT_EQ(c.num_cached(), 2);
  EXPECT_TRUE(c.CheckInvariants().ok());
}

TEST(PrefixCacheTest, ASecondCopyOfAKeyStaysUnindexedAndChainsFromTheFirst) {
  PrefixCache c(8);
  const uint64_t a = c.Insert(1, PrefixCache::kRoot, {9, 9});
  EXPECT_EQ(c.Insert(2, PrefixCache::kRoot, {9, 9}), a);
  EXPECT_FALSE(c.IsCached(2));
  EXPECT_EQ(c.Find(PrefixCache::kRoot, {9, 9}), 1);
  EXPECT_TRUE(c.CheckInvariants().ok());
}

TEST(PrefixCacheTest, ARefilledParentOrphansItsOldChildren) {
  PrefixCache c(8);
  const uint64_t a = c.Insert(0, PrefixCache::kRoot, {1, 1});
  c.Insert(1, a, {2, 2});
  c.PushFree(0);
  c.PushFree(1);
  EXPECT_EQ(c.PopOldestFree(), 0);  // block 0 is taken for other KV
  EXPECT_EQ(c.Find(PrefixCache::kRoot, {1, 1}), -1);
  // Block 0 comes back with the same tokens: a new uid, so the old child
  // (computed after the old block 0) is not reachable through it.
  const uint64_t a2 = c.Insert(0, PrefixCache::kRoot, {1, 1});
  EXPECT_NE(a2, a);
  EXPECT_EQ(c.Find(a2, {2, 2}), -1);
  EXPECT_TRUE(c.CheckInvariants().ok());
}

TEST(PrefixCacheTest, TheLruListGivesBackTheOldestFirst) {
  PrefixCache c(8);
  for (int32_t b : {4, 2, 6}) c.Insert(b, PrefixCache::kRoot, {b});
  c.PushFree(4);
  c.PushFree(2);
  c.PushFree(6);
  c.RemoveFree(2);  // matched by a request: held again
  EXPECT_EQ(c.num_free(), 2);
  EXPECT_FALSE(c.IsFree(2));
  EXPECT_EQ(c.PopOldestFree(), 4);
  EXPECT_FALSE(c.IsCached(4));
  EXPECT_EQ(c.PopOldestFree(), 6);
  EXPECT_EQ(c.num_free(), 0);
  EXPECT_TRUE(c.IsCached(2));
  EXPECT_TRUE(c.CheckInvariants().ok());
}

TEST(PrefixCacheTest, ClearReturnsTheIdleBlocksOldestFirst) {
  PrefixCache c(8);
  for (int32_t b : {1, 2, 3}) c.Insert(b, PrefixCache::kRoot, {b, b});
  c.PushFree(3);
  c.PushFree(1);
  EXPECT_THAT(c.Clear(), ElementsAre(3, 1));
  EXPECT_EQ(c.num_cached(), 0);
  EXPECT_EQ(c.num_free(), 0);
  for (int32_t b = 0; b < 8; ++b) EXPECT_FALSE(c.IsCached(b));
  EXPECT_TRUE(c.CheckInvariants().ok());
}

}  // namespace
}  // namespace tandem::sched
