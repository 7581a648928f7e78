#include "coordinator/scheduler/block_manager.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

BlockManager Make(int64_t block_size, int64_t gpu, int64_t cpu) {
  auto m = BlockManager::Create(block_size, gpu, cpu);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

TEST(BlockManagerTest, CreateValidates) {
  EXPECT_EQ(BlockManager::Create(0, 4, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockManager::Create(16, -1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockManager::Create(16, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BlockManager::Create(16, 0, 4).ok());  // CPU-only
}

TEST(BlockManagerTest, BlocksForTokensRoundsUp) {
  BlockManager m = Make(4, 8, 0);
  EXPECT_EQ(m.BlocksForTokens(0), 0);
  EXPECT_EQ(m.BlocksForTokens(1), 1);
  EXPECT_EQ(m.BlocksForTokens(4), 1);
  EXPECT_EQ(m.BlocksForTokens(5), 2);
}

TEST(BlockManagerTest, GrowsOnDemandWithLowestFreeIds) {
  BlockManager m = Make(4, 8, 0);
  ASSERT_TRUE(m.Allocate(7, KvPool::kGpu, 1).ok());
  EXPECT_THAT(m.BlockTable(7), ElementsAre(0));
  ASSERT_TRUE(m.Allocate(7, KvPool::kGpu, 4).ok());  // still one block
  EXPECT_THAT(m.BlockTable(7), ElementsAre(0));
  ASSERT_TRUE(m.Allocate(9, KvPool::kGpu, 6).ok());
  EXPECT_THAT(m.BlockTable(9), ElementsAre(1, 2));
  ASSERT_TRUE(m.Allocate(7, KvPool::kGpu, 9).ok());
  EXPECT_THAT(m.BlockTable(7), ElementsAre(0, 3, 4));
  EXPECT_EQ(m.CapacityOf(7), 12);
  ASSERT_TRUE(m.Allocate(7, KvPool::kGpu, 2).ok());  // never shrinks
  EXPECT_THAT(m.BlockTable(7), ElementsAre(0, 3, 4));
  m.Free(7);
  EXPECT_THAT(m.BlockTable(7), IsEmpty());
  ASSERT_TRUE(m.Allocate(11, KvPool::kGpu, 16).ok());
  EXPECT_THAT(m.BlockTable(11), ElementsAre(0, 3, 4, 5));
  EXPECT_TRUE(m.CheckInvariants().ok());
}

TEST(BlockManagerTest, SameCallsGiveSameTables) {
  auto run = [] {
    BlockManager m = Make(2, 16, 0);
    std::vector<std::vector<int32_t>> tables;
    for (int64_t id = 0; id < 5; ++id)
      EXPECT_TRUE(m.Allocate(id, KvPool::kGpu, id + 1).ok());
    m.Free(1);
    m.Free(3);
    EXPECT_TRUE(m.Allocate(9, KvPool::kGpu, 7).ok());
    for (int64_t id : {0, 2, 4, 9}) tables.push_back(m.BlockTable(id));
    return tables;
  };
  EXPECT_EQ(run(), run());
}

TEST(BlockManagerTest, ExhaustionTakesNothing) {
  BlockManager m = Make(4, 3, 0);
  ASSERT_TRUE(m.Allocate(1, KvPool::kGpu, 8).ok());
  EXPECT_FALSE(m.CanAllocate(1, KvPool::kGpu, 13));
  const absl::Status s = m.Allocate(1, KvPool::kGpu, 13);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(m.BlockTable(1), ElementsAre(0, 1));
  EXPECT_EQ(m.num_free_blocks(KvPool::kGpu), 1);
  EXPECT_EQ(m.Allocate(2, KvPool::kGpu, 5).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(m.HasTable(2));
  EXPECT_TRUE(m.CheckInvariants().ok());
}

TEST(BlockManagerTest, TwoPoolsAreSeparate) {
  BlockManager m = Make(4, 2, 3);
  ASSERT_TRUE(m.Allocate(1, KvPool::kGpu, 8).ok());
  ASSERT_TRUE(m.Allocate(2, KvPool::kCpu, 5).ok());
  EXPECT_THAT(m.BlockTable(2), ElementsAre(0, 1));  // ids are per pool
  EXPECT_EQ(m.PoolOf(1), KvPool::kGpu);
  EXPECT_EQ(m.PoolOf(2), KvPool::kCpu);
  EXPECT_EQ(m.PoolOf(3), std::nullopt);
  EXPECT_EQ(m.num_used_blocks(KvPool::kGpu), 2);
  EXPECT_EQ(m.num_used_blocks(KvPool::kCpu), 2);
  EXPECT_EQ(m.num_free_blocks(KvPool::kCpu), 1);
  EXPECT_DOUBLE_EQ(m.usage(KvPool::kGpu), 1.0);
  EXPECT_NEAR(m.usage(KvPool::kCpu), 2.0 / 3.0, 1e-12);
  // A table never spans pools.
  EXPECT_EQ(m.Allocate(1, KvPool::kCpu, 12).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(m.CanAllocate(1, KvPool::kCpu, 12));
  m.Free(1);
  EXPECT_EQ(m.num_used_blocks(KvPool::kGpu), 0);
  EXPECT_TRUE(m.CheckInvariants().ok());
}

TEST(BlockManagerTest, UnconfiguredPoolAndEdgeCases) {
  BlockManager m = Make(4, 2, 0);
  EXPECT_FALSE(m.is_configured(KvPool::kCpu));
  EXPECT_DOUBLE_EQ(m.usage(KvPool::kCpu), 0.0);
  EXPECT_EQ(m.Allocate(1, KvPool::kCpu, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Allocate(1, KvPool::kGpu, -1).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Allocate(1, KvPool::kGpu, 0).ok());
  EXPECT_FALSE(m.HasTable(1));  // zero tokens: no table
  m.Free(42);                   // unknown: ignored
  EXPECT_EQ(m.NewBlocksNeeded(5, 9), 3);
  EXPECT_TRUE(m.CheckInvariants().ok());
}

TEST(BlockManagerTest, RandomOperationsKeepExactAccounting) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  BlockManager m = Make(3, 20, 12);
  std::vector<int64_t> tokens(16, 0);  // per request id: tokens reserved
  for (int op = 0; op < 5000; ++op) {
    const int64_t id = rng() % tokens.size();
    if (rng() % 4 == 0) {
      m.Free(id);
      tokens[id] = 0;
    } else {
      const KvPool pool =
          m.PoolOf(id).value_or(rng() % 2 ? KvPool::kGpu : KvPool::kCpu);
      const int64_t want = tokens[id] + static_cast<int64_t>(rng() % 7);
      const bool can = m.CanAllocate(id, pool, want);
      const int64_t free_before = m.num_free_blocks(pool);
      const int64_t need = m.NewBlocksNeeded(id, want);
      const absl::Status s = m.Allocate(id, pool, want);
      ASSERT_EQ(s.ok(), can) << s;
      if (s.ok()) {
        tokens[id] = std::max(tokens[id], want);
        EXPECT_EQ(m.num_free_blocks(pool), free_before - need);
      } else {
        EXPECT_EQ(m.num_free_blocks(pool), free_before);
      }
      EXPECT_GE(m.CapacityOf(id), tokens[id]);
    }
    const absl::Status inv = m.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv << " after op " << op;
  }
}

}  // namespace
}  // namespace tandem::sched
