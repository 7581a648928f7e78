#include "gpu_worker/engine/kv_cache.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(KvCache, ReserveGrowsByBlocksAndFreeReturnsThem) {
  auto kv = KvCache::Create(2, 2, 8, 6, 4).value();
  EXPECT_EQ(kv->free_blocks(), 6);
  ASSERT_TRUE(kv->Reserve(7, 5).ok());  // 2 blocks
  EXPECT_EQ(kv->Capacity(7), 8);
  EXPECT_EQ(kv->BlockTable(7).size(), 2u);
  ASSERT_TRUE(kv->Reserve(7, 8).ok());  // still 2
  EXPECT_EQ(kv->free_blocks(), 4);
  ASSERT_TRUE(kv->Reserve(9, 16).ok());  // 4 blocks
  EXPECT_EQ(kv->free_blocks(), 0);
  const absl::Status full = kv->Reserve(7, 9);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kv->Capacity(7), 8);  // unchanged by the failure
  kv->Free(9);
  EXPECT_EQ(kv->free_blocks(), 4);
  EXPECT_FALSE(kv->Has(9));
  EXPECT_TRUE(kv->Reserve(7, 9).ok());
}

TEST(KvCache, FailedReserveOfNewSequenceLeavesNoTrace) {
  auto kv = KvCache::Create(1, 1, 4, 2, 4).value();
  EXPECT_FALSE(kv->Reserve(1, 100).ok());
  EXPECT_FALSE(kv->Has(1));
  EXPECT_EQ(kv->free_blocks(), 2);
}

TEST(KvCache, BlocksOfDifferentSequencesDoNotAlias) {
  auto kv = KvCache::Create(1, 1, 4, 4, 2).value();
  ASSERT_TRUE(kv->Reserve(1, 4).ok());
  ASSERT_TRUE(kv->Reserve(2, 4).ok());
  for (int32_t a : kv->BlockTable(1)) {
    for (int32_t b : kv->BlockTable(2)) EXPECT_NE(a, b);
  }
}

TEST(KvCache, AdoptedTablesAreTheCallersAndMayShareBlocks) {
  auto kv = KvCache::Create(2, 2, 8, 6, 4).value();
  ASSERT_TRUE(kv->Adopt(1, {4, 2}, 8).ok());
  ASSERT_TRUE(kv->Adopt(2, {4, 0, 5}, 9).ok());  // block 4 shared
  EXPECT_EQ(kv->BlockTable(2), (std::vector<int32_t>{4, 0, 5}));
  EXPECT_EQ(kv->free_blocks(), 6);  // the caller allocates, not the cache
  kv->Free(1);
  EXPECT_FALSE(kv->Has(1));
  EXPECT_EQ(kv->free_blocks(), 6);
  // While adopted tables live, the cache does not allocate itself.
  EXPECT_EQ(kv->Reserve(3, 4).code(), absl::StatusCode::kFailedPrecondition);
  kv->Free(2);
  EXPECT_TRUE(kv->Reserve(3, 4).ok());
  // ... and while it has, it adopts nothing.
  EXPECT_EQ(kv->Adopt(4, {1}, 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KvCache, AdoptRefusesBadTablesAndChangesNothing) {
  auto kv = KvCache::Create(2, 2, 8, 6, 4).value();
  EXPECT_EQ(kv->Adopt(1, {0, 6}, 5).code(), absl::StatusCode::kInvalidArgument);   // outside
  EXPECT_EQ(kv->Adopt(1, {0, -1}, 5).code(), absl::StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ(kv->Adopt(1, {2, 2}, 5).code(), absl::StatusCode::kInvalidArgument);   // twice
  EXPECT_EQ(kv->Adopt(1, {2}, 5).code(), absl::StatusCode::kInvalidArgument);      // too short
  EXPECT_FALSE(kv->Has(1));
  EXPECT_TRUE(kv->Reserve(1, 4).ok());  // nothing was adopted
}

TEST(KvCache, RejectsBadDimensions) {
  EXPECT_FALSE(KvCache::Create(0, 1, 4, 4, 2).ok());
  EXPECT_FALSE(KvCache::Create(1, 1, 4, 4, -2).ok());
}

}  // namespace
}  // namespace tandem
