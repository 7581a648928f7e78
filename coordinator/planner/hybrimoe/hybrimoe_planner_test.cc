#include "coordinator/planner/hybrimoe/hybrimoe_planner.h"

#include <cstdio>
#include <memory>
#include <string>

#include "coordinator/planner/testing/planner_test_models.h"
#include "gtest/gtest.h"

namespace tandem::planner {
namespace {

using testing::Llama2_70B;
using testing::Mixtral8x7B;
using testing::Rtx3090Epyc7742;

Workload Chat() {
  Workload w;
  w.prompt_len = 512;
  w.gen_len = 128;
  return w;
}

class HybriMoePlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = ModelCost::Create(Mixtral8x7B());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<ModelCost>(*std::move(m));
    hw_ = Rtx3090Epyc7742();
    w_ = Chat();
  }
  PlanInput Input(const HardwareProfile* hw = nullptr,
                  const Workload* w = nullptr) const {
    return PlanInput{model_.get(), hw ? hw : &hw_, w ? w : &w_};
  }
  std::unique_ptr<ModelCost> model_;
  HardwareProfile hw_;
  Workload w_;
};

TEST_F(HybriMoePlannerTest, LayoutFillsTheGpuWithCacheSlots) {
  // Batch 1, no prefetch, on 24576 MiB = 25,769,803,776 B:
  //  non-expert weights: 93,405,585,408 total
  //                      − 256 experts · 352,321,536 = 3,211,272,192
  //  KV:          1 · (512 + 128) · 131,072 = 83,886,080
  //  activations: 4096 · (4·4096 + 2·14336 + 6144) · 2
  //               + 32000 · 4 = 419,558,400
  //  staging:     2 · 352,321,536 = 704,643,072
  //  reserve:     2,000,000,000
  //  free:        19,350,443,904; a slot in every layer costs
  //               32 · 352,321,536 = 11,274,289,152 -> 1 slot (1.72).
  HybriMoeOptions o;
  auto l = HybriMoeLayoutFor(Input(), o, 1, 0);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->fits) << l->why_not;
  EXPECT_DOUBLE_EQ(l->gpu_weights, 3211272192.0);
  EXPECT_DOUBLE_EQ(l->gpu_kv, 83886080.0);
  EXPECT_DOUBLE_EQ(l->gpu_activations, 419558400.0);
  EXPECT_DOUBLE_EQ(l->gpu_expert_buffers, 704643072.0);
  EXPECT_EQ(l->cache_slots, 1);
  EXPECT_DOUBLE_EQ(l->gpu_cache, 11274289152.0);
  EXPECT_LE(l->gpu_total(), static_cast<double>(hw_.gpu.memory_bytes));

  // The same machine with 80 GB of GPU memory leaves 73.6 GB free -> 6 slots.
  HardwareProfile big = hw_;
  big.gpu.memory_bytes = 80'000'000'000;
  auto lb = HybriMoeLayoutFor(Input(&big), o, 1, 0);
  ASSERT_TRUE(lb.ok());
  EXPECT_EQ(lb->cache_slots, 6);
}

TEST_F(HybriMoePlannerTest, DecodeAtBatchOneRunsBothExpertsOnTheCpu) {
  // One token activates A = 8·(1 − 6/8) = 2 experts, 1 token each; with 1
  // slot of 8 the expected hits round to 0. Per expert: GPU 376 us (352 MB
  // at 936 GB/s) after a 14.10 ms transfer; CPU 2.649 ms (352 MB at
  // 133 GB/s) + 3 calls · 3.4 us = 2.659 ms. The split: GPU 14.475 ms vs CPU
  // 2.659 -> CPU; then 14.475 vs 5.318 -> CPU again. (Each CPU expert also
  // reads and writes its token's activations: 16 KB, 0.12 us.)
  HybriMoeOptions o;
  auto l = HybriMoeLayoutFor(Input(), o, 1, 0);
  ASSERT_TRUE(l.ok());
  auto step = SimulateHybriMoeDecode(Input(), *l);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->active_experts, 2);
  EXPECT_EQ(step->cached_active, 0);
  EXPECT_EQ(step->tokens_per_expert, 1);
  EXPECT_TRUE(step->layer_split.gpu.empty());
  ASSERT_EQ(step->layer_split.cpu.size(), 2u);
  const double cpu_expert = (352321536.0 + 2 * 4096 * 2) / 133e9 + 3 * 3.4e-6;
  EXPECT_NEAR(step->layer_split.cpu_finish_s, 2 * cpu_expert, 1e-12);
  // 32 layers of CPU experts bound the step from below; the CPU is the
  // bottleneck.
  EXPECT_GE(step->sim.makespan_s, 32 * 2 * cpu_expert);
  EXPECT_NEAR(step->sim.busy(Resource::kCpu), 32 * 2 * cpu_expert, 1e-12);
  EXPECT_EQ(step->sim.bottleneck(), Resource::kCpu);

  // With 6 slots (80 GB GPU) the hits are round(2 · 6/8) = 2: both experts
  // run on the GPU from the cache and the step is several times shorter.
  HardwareProfile big = hw_;
  big.gpu.memory_bytes = 80'000'000'000;
  auto lb = HybriMoeLayoutFor(Input(&big), o, 1, 0);
  ASSERT_TRUE(lb.ok());
  auto fast = SimulateHybriMoeDecode(Input(&big), *lb);
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ(fast->cached_active, 2);
  EXPECT_TRUE(fast->layer_split.cpu.empty());
  EXPECT_LT(fast->sim.makespan_s * 3, step->sim.makespan_s);
}

TEST_F(HybriMoePlannerTest, PlanIsConsistent) {
  auto plan = PlanHybriMoe(Input());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const proto::Policy& p = plan->policy;
  EXPECT_EQ(p.family(), proto::HYBRIMOE);
  EXPECT_DOUBLE_EQ(p.cache_score_alpha(), 0.5);
  ASSERT_EQ(p.layers_size(), 32);
  // Larger batches buy throughput with KV that displaces cache slots.
  const proto::LayerPolicy& l0 = p.layers(0);
  EXPECT_GE(l0.expert_cache_slots(), 0);
  EXPECT_NEAR(l0.gg_fraction() + l0.cg_fraction() + l0.cc_fraction(), 1.0,
              1e-12);
  EXPECT_NEAR(l0.gg_fraction(), l0.expert_cache_slots() / 8.0, 1e-12);
  const proto::Prediction& pred = p.prediction();
  const double gen = 128;
  EXPECT_NEAR(pred.throughput_tokens_per_s(),
              p.batch_size() * gen /
                  (pred.prefill_seconds() + gen * pred.decode_step_seconds()),
              1e-9 * pred.throughput_tokens_per_s());
  EXPECT_DOUBLE_EQ(pred.decode_step_seconds(), plan->decode_sim.makespan_s);
  EXPECT_LE(pred.gpu_memory_bytes(), hw_.gpu.memory_bytes);
  EXPECT_GT(pred.cpu_memory_bytes(), 90e9);  // every expert has a host copy
  std::printf(
      "[hybrimoe] Mixtral-8x7B, RTX 3090: %s\n[hybrimoe] %.1f tok/s, ITL %.3f "
      "s\n",
      p.rationale().c_str(), pred.throughput_tokens_per_s(),
      pred.inter_token_latency_seconds());

  // Batch 1 decodes faster than the throughput-best batch.
  HybriMoeOptions one;
  one.batch_size = 1;
  auto single = PlanHybriMoe(Input(), one);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->policy.batch_size(), 1);
  EXPECT_LE(single->policy.prediction().inter_token_latency_seconds(),
            pred.inter_token_latency_seconds());
  std::printf("[hybrimoe] batch 1: ITL %.1f ms (%s)\n",
              1e3 * single->policy.prediction().inter_token_latency_seconds(),
              single->policy.rationale().c_str());
}

TEST_F(HybriMoePlannerTest, SloSelectsASmallerBatchOrFails) {
  auto best = PlanHybriMoe(Input());
  ASSERT_TRUE(best.ok());
  Workload online = w_;
  online.objective = Objective::kThroughputUnderItlSlo;
  // Just below the throughput-best plan's ITL: a smaller batch must be taken.
  online.slo_itl_s =
      best->policy.prediction().inter_token_latency_seconds() * 0.99;
  auto slo = PlanHybriMoe(Input(nullptr, &online));
  ASSERT_TRUE(slo.ok()) << slo.status();
  EXPECT_LE(slo->policy.prediction().inter_token_latency_seconds(),
            online.slo_itl_s);
  EXPECT_LT(slo->policy.batch_size(), best->policy.batch_size());

  online.slo_itl_s = 1e-3;  // 1 ms for 32 layers of Mixtral: impossible
  auto none = PlanHybriMoe(Input(nullptr, &online));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("SLO"), std::string::npos)
      << none.status();
}

TEST_F(HybriMoePlannerTest, RefusesWhatItCannotRun) {
  auto dense = ModelCost::Create(Llama2_70B());
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(PlanHybriMoe(PlanInput{&*dense, &hw_, &w_}).status().code(),
            absl::StatusCode::kFailedPrecondition);

  const HardwareProfile tiny = hw_.WithGpuMemory(int64_t{4} << 30);
  auto plan = PlanHybriMoe(Input(&tiny));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("exceed"), std::string::npos)
      << plan.status();

  HardwareProfile small_host = hw_;
  small_host.cpu.memory_bytes = int64_t{64} * 1000 * 1000 * 1000;
  EXPECT_EQ(PlanHybriMoe(Input(&small_host)).status().code(),
            absl::StatusCode::kFailedPrecondition);

  EXPECT_EQ(
      PlanHybriMoe(PlanInput{model_.get(), &hw_, nullptr}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::planner
