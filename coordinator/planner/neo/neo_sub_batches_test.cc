// The service's per-step Neo sub-batches: the order and sizes follow
// PlanIteration's decision on the planner's costs, every sequence runs
// exactly once, and steps without CPU decodes stay one batch.
#include "coordinator/planner/neo/neo_sub_batches.h"

#include <algorithm>
#include <set>
#include <vector>

#include "coordinator/planner/neo/neo_costs.h"
#include "coordinator/planner/testing/planner_test_models.h"
#include "gtest/gtest.h"

namespace tandem::planner {
namespace {

// Llama-2-7B on MoE-Lightning's T4 (Neo's own testbed class): one sequence's
// KV on the GPU, the rest on the CPU.
struct Fixture {
  ModelConfig config = testing::Llama2_7B();
  HardwareProfile hw;
  std::unique_ptr<NeoSubBatcher> batcher;
  Fixture() {
    absl::StatusOr<HardwareProfile> h = testing::ShippedProfile("t4-xeon24");
    EXPECT_TRUE(h.ok()) << h.status();
    if (h.ok()) hw = *h;
    auto b = NeoSubBatcher::Create(config, hw);
    EXPECT_TRUE(b.ok()) << b.status();
    if (b.ok()) batcher = *std::move(b);
  }
};

TEST(NeoSubBatchesTest, CpuDecodesGoWherePlanIterationPutsThem) {
  Fixture f;
  ASSERT_NE(f.batcher, nullptr);
  // A GPU decode, a prefill chunk and 30 CPU decodes of growing context.
  std::vector<StepSequenceShape> step = {{1, 383, false}, {64, 0, false}};
  for (int i = 0; i < 30; ++i) step.push_back({1, 200 + 10 * i, true});
  absl::StatusOr<StepSubBatches> r = f.batcher->Split(step);
  ASSERT_TRUE(r.ok()) << r.status();

  // The same decision straight from PlanIteration.
  absl::StatusOr<ModelCost> m = ModelCost::Create(f.config);
  ASSERT_TRUE(m.ok()) << m.status();
  NeoCosts costs(*m, f.hw);
  std::vector<neo::DecodeRequest> decodes = {{0, 384, neo::KvLocation::kGpu}};
  for (int i = 0; i < 30; ++i) decodes.push_back({2 + i, 201 + 10 * i, neo::KvLocation::kCpu});
  std::vector<neo::PrefillRequest> prefills = {{1, 64}};
  absl::StatusOr<neo::IterationPlan> plan =
      neo::PlanIteration(prefills, decodes, costs.Functions(), 32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->pipelined) << "the T4's GPU work should hide some CPU attention";
  ASSERT_FALSE(plan->batch1.cpu_decode_ids.empty());

  ASSERT_EQ(r->sizes.size(), 2u);
  EXPECT_EQ(r->sizes[0], plan->batch0.requests());
  EXPECT_EQ(r->sizes[0] + r->sizes[1], static_cast<int64_t>(step.size()));
  std::set<size_t> first(r->order.begin(), r->order.begin() + r->sizes[0]);
  std::set<size_t> want = {0, 1};
  for (int64_t id : plan->batch0.cpu_decode_ids) want.insert(static_cast<size_t>(id));
  EXPECT_EQ(first, want);
  // Every sequence once; the deferred ones run in batch-1.
  std::vector<size_t> all = r->order;
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], i);
  std::printf("batch-0 %lld sequences (%zu CPU decodes), batch-1 %lld (%zu deferred by Neo)\n",
              static_cast<long long>(r->sizes[0]), plan->batch0.cpu_decode_ids.size(),
              static_cast<long long>(r->sizes[1]), plan->deferred_ids.size());
}

TEST(NeoSubBatchesTest, WithoutCpuDecodesTheStepIsOneBatch) {
  Fixture f;
  ASSERT_NE(f.batcher, nullptr);
  // A CPU-pool prefill chunk is batch-0 work, not a CPU decode.
  const std::vector<StepSequenceShape> step = {{1, 10, false}, {32, 0, true}, {1, 50, false}};
  absl::StatusOr<StepSubBatches> r = f.batcher->Split(step);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sizes.empty());
  EXPECT_EQ(r->order, (std::vector<size_t>{0, 1, 2}));
}

TEST(NeoSubBatchesTest, BadStepsAndProfilesAreRefused) {
  Fixture f;
  ASSERT_NE(f.batcher, nullptr);
  const std::vector<StepSequenceShape> empty_chunk = {{0, 3, true}};
  EXPECT_EQ(f.batcher->Split(empty_chunk).status().code(), absl::StatusCode::kInvalidArgument);
  HardwareProfile no_gpu = f.hw;
  no_gpu.gpu = {};
  EXPECT_FALSE(NeoSubBatcher::Create(f.config, no_gpu).ok());
}

}  // namespace
}  // namespace tandem::planner
