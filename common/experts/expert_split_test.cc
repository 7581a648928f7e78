#include "common/experts/expert_split.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::experts {
namespace {

// HybriMoE's own linear costs for Mixtral (related.md §2; ms used as the
// unit here): GPU 0.5 per expert, CPU 0.2·tokens + 0.79, transfer 0.418.
ExpertCosts HybriMoeMixtralCosts(double transfer) {
  ExpertCosts c;
  c.gpu_compute_s = [](int64_t) { return 0.5; };
  c.cpu_compute_s = [](int64_t t) {
    return 0.2 * static_cast<double>(t) + 0.79;
  };
  c.transfer_s = transfer;
  return c;
}

std::vector<int> Ids(const std::vector<ExpertAssignment>& v) {
  std::vector<int> out;
  for (const auto& a : v) out.push_back(a.expert);
  return out;
}

TEST(ExpertSplit, WorkedExample) {
  // Sorted: e0 (cached, 10), then uncached by tokens: e4 (8), e1 (6),
  // e2 (3), e3 (1). GPU from the head, CPU from the tail:
  //  1. e0 on GPU -> 0.5        vs e3 on CPU -> 0.99   : GPU takes e0
  //  2. e4 arrives 0.418, starts max(0.5, 0.418) -> 1.0 vs 0.99 : CPU takes e3
  //  3. e4 -> 1.0               vs e2 -> 0.99 + 1.39 = 2.38 : GPU takes e4
  //  4. e1 arrives 0.836, starts 1.0 -> 1.5 vs 2.38      : GPU takes e1
  //  5. e2 arrives 1.254, starts 1.5 -> 2.0 vs 2.38      : GPU takes e2
  const std::vector<ExpertWork> work = {{0, 10, true},
                                        {1, 6, false},
                                        {2, 3, false},
                                        {3, 1, false},
                                        {4, 8, false}};
  auto s = SplitExperts(work, HybriMoeMixtralCosts(0.418));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Ids(s->gpu), (std::vector<int>{0, 4, 1, 2}));
  EXPECT_EQ(Ids(s->cpu), (std::vector<int>{3}));
  EXPECT_NEAR(s->gpu_finish_s, 2.0, 1e-12);
  EXPECT_NEAR(s->cpu_finish_s, 0.99, 1e-12);
  EXPECT_NEAR(s->link_busy_s, 3 * 0.418, 1e-12);
  EXPECT_NEAR(s->makespan_s(), 2.0, 1e-12);
  // Per-expert timings: e1 waited for the GPU, not for its transfer.
  EXPECT_NEAR(s->gpu[2].transfer_end_s, 0.836, 1e-12);
  EXPECT_NEAR(s->gpu[2].start_s, 1.0, 1e-12);
  EXPECT_NEAR(s->gpu[2].finish_s, 1.5, 1e-12);
  EXPECT_EQ(s->gpu[0].transfer_end_s, 0);  // cached: nothing to move
}

TEST(ExpertSplit, SlowLinkPushesExpertsToTheCpu) {
  // Transfer 2.0: e0 (cached, 10), e1 (6), e2 (3), e3 (1).
  //  1. e0 -> 0.5 vs e3 -> 0.99            : GPU e0
  //  2. e1 arrives 2.0 -> 2.5 vs e3 0.99   : CPU e3
  //  3. e1 -> 2.5 vs e2 -> 0.99 + 1.39 = 2.38 : CPU e2
  //  4. e1 -> 2.5 vs e1 on CPU -> 2.38 + 1.99 = 4.37 : GPU e1
  const std::vector<ExpertWork> work = {
      {0, 10, true}, {1, 6, false}, {2, 3, false}, {3, 1, false}};
  auto s = SplitExperts(work, HybriMoeMixtralCosts(2.0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Ids(s->gpu), (std::vector<int>{0, 1}));
  EXPECT_EQ(Ids(s->cpu), (std::vector<int>{3, 2}));
  EXPECT_NEAR(s->gpu_finish_s, 2.5, 1e-12);
  EXPECT_NEAR(s->cpu_finish_s, 2.38, 1e-12);
  EXPECT_NEAR(s->link_busy_s, 2.0, 1e-12);
}

TEST(ExpertSplit, CachedExpertsGoFirstEvenWithFewTokens) {
  // A cached expert with 1 token outranks an uncached one with 50, and ties
  // keep the caller's order. GPU 0.5, CPU 0.2·t + 0.79, transfer 0.418:
  //  1. e7 (cached, 1) -> 0.5 vs e9 (1) -> 0.99 : GPU
  //  2. e5 (cached, 1) -> 1.0 vs e9 -> 0.99     : CPU e9
  //  3. e5 -> 1.0 vs e8 (50) -> 0.99 + 10.79    : GPU e5
  //  4. e8 arrives 0.418, starts 1.0 -> 1.5     : GPU e8
  const std::vector<ExpertWork> work = {
      {8, 50, false}, {7, 1, true}, {5, 1, true}, {9, 1, false}};
  auto s = SplitExperts(work, HybriMoeMixtralCosts(0.418));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Ids(s->gpu), (std::vector<int>{7, 5, 8}));
  EXPECT_EQ(Ids(s->cpu), (std::vector<int>{9}));
  EXPECT_NEAR(s->gpu_finish_s, 1.5, 1e-12);
}

TEST(ExpertSplit, IdleExpertsAndEmptyInput) {
  auto empty = SplitExperts({}, HybriMoeMixtralCosts(0.418));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->gpu.empty());
  EXPECT_TRUE(empty->cpu.empty());
  EXPECT_EQ(empty->makespan_s(), 0);

  // Experts without tokens are not activated.
  auto s = SplitExperts({{0, 0, true}, {1, 0, false}, {2, 4, false}},
                        HybriMoeMixtralCosts(0.418));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->gpu.size() + s->cpu.size(), 1u);
}

TEST(ExpertSplit, RejectsBadInput) {
  EXPECT_EQ(
      SplitExperts({{0, -1, false}}, HybriMoeMixtralCosts(0.4)).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      SplitExperts({{3, 1, false}, {3, 2, true}}, HybriMoeMixtralCosts(0.4))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  ExpertCosts missing = HybriMoeMixtralCosts(0.4);
  missing.cpu_compute_s = nullptr;
  EXPECT_EQ(SplitExperts({{0, 1, false}}, missing).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpertCosts nan = HybriMoeMixtralCosts(0.4);
  nan.gpu_compute_s = [](int64_t) {
    return std::numeric_limits<double>::quiet_NaN();
  };
  EXPECT_EQ(SplitExperts({{0, 1, false}}, nan).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      SplitExperts({{0, 1, false}}, HybriMoeMixtralCosts(-1)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::experts
