#include "coordinator/planner/scheinfer/scheinfer_plan.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "coordinator/planner/scheinfer/cost_model.h"
#include "coordinator/planner/scheinfer/test_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::planner::scheinfer {
namespace {

using ::testing::HasSubstr;
using testing::Llama2_70B;
using testing::Mixtral8x7B;
using testing::PaperWorkload;
using testing::TestbedA;

ModelCost Cost(const ModelConfig& c, double bpe = 0.5) {
  CostOptions o;
  o.weight_bytes_per_element = bpe;
  absl::StatusOr<ModelCost> m = ModelCost::Create(c, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// LLaMA-2-70B 4-bit on testbed A capped at 24 GB (the paper's setting).
TEST(PlanScheInferTest, Llama70bOn24GbPolicyIsComplete) {
  const ModelCost m = Cost(Llama2_70B());
  const HardwareProfile hw = TestbedA().WithGpuMemory(24'000'000'000);
  const Workload w = PaperWorkload();
  absl::StatusOr<FamilyPlan> plan = planner::PlanScheInfer({&m, &hw, &w});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const proto::Policy& pol = plan->policy;
  std::printf("%s\n", pol.rationale().c_str());
  EXPECT_EQ(pol.family(), proto::SCHEINFER);
  ASSERT_EQ(pol.layers_size(), 80);
  bool some_gg = false, some_cg = false, some_cc = false;
  for (const proto::LayerPolicy& l : pol.layers()) {
    EXPECT_NEAR(l.gg_fraction() + l.cg_fraction() + l.cc_fraction(), 1, 1e-12);
    EXPECT_GE(l.gg_fraction(), 0);
    EXPECT_GE(l.cg_fraction(), 0);
    EXPECT_GE(l.cc_fraction(), 0);
    EXPECT_EQ(l.attention_device(), proto::GPU);
    EXPECT_TRUE(l.attention_weights_on_gpu());
    some_gg |= l.gg_fraction() > 0;
    some_cg |= l.cg_fraction() > 0;
    some_cc |= l.cc_fraction() > 0;
  }
  // 35 GB of 4-bit weights in 24 GB: all three kinds are in use.
  EXPECT_TRUE(some_gg && some_cg && some_cc);
  const int64_t b = pol.batch_size();
  EXPECT_GE(b, 1);
  EXPECT_EQ(b & (b - 1), 0) << "a power of two";
  EXPECT_LE(b, 64);
  const proto::Prediction& pr = pol.prediction();
  EXPECT_GT(pr.decode_step_seconds(), 0);
  EXPECT_EQ(pr.inter_token_latency_seconds(), pr.decode_step_seconds());
  EXPECT_NEAR(plan->decode_sim.makespan_s, pr.decode_step_seconds(), 1e-15);
  // throughput = B·n / (prefill of B prompts + n decode steps)
  EXPECT_NEAR(
      pr.throughput_tokens_per_s(),
      b * 128.0 / (pr.prefill_seconds() + 128 * pr.decode_step_seconds()),
      1e-9);
  EXPECT_LE(pr.gpu_memory_bytes(), 24'000'000'000);
  EXPECT_GT(pr.cpu_memory_bytes(), 0);
  EXPECT_FALSE(pr.bottleneck().empty());
  EXPECT_GT(pr.busy_seconds().at("h2d"), 0);
  EXPECT_GT(pr.busy_seconds().at("cpu"), 0);
  EXPECT_GT(pr.busy_seconds().at("gpu"), 0);
  EXPECT_GE(pol.prefill_gpu_tokens(), 0);
  EXPECT_LE(pol.prefill_gpu_tokens(), 1024);
  EXPECT_FALSE(pol.rationale().empty());
  // The graph is the whole step: every layer is in it, and it traces.
  bool last_layer = false;
  for (const Task& t : plan->decode_step.tasks())
    last_layer |= t.name.rfind("L79 ", 0) == 0;
  EXPECT_TRUE(last_layer);
  nlohmann::json trace = nlohmann::json::parse(
      ChromeTraceJson(plan->decode_step, plan->decode_sim), nullptr,
      /*allow_exceptions=*/false);
  EXPECT_FALSE(trace.is_discarded());
}

// The throughput objective keeps the batch with the best throughput among
// {1, 2, 4, ...}; the SLO objective the largest whose step meets the SLO.
TEST(PlanScheInferTest, BatchChoice) {
  const ModelCost m = Cost(Llama2_70B());
  const HardwareProfile hw = TestbedA().WithGpuMemory(24'000'000'000);
  Workload w = PaperWorkload();
  w.max_batch = 16;
  std::vector<BatchPlan> plans;
  for (int64_t b = 1; b <= 16; b *= 2) {
    absl::StatusOr<BatchPlan> p = PlanBatch({&m, &hw, &w}, b);
    ASSERT_TRUE(p.ok()) << p.status();
    std::printf(
        "  batch %2lld: step %.2f ms, prefill %.2f s/prompt, %.3f tok/s\n",
        static_cast<long long>(b), p->decode_step_s * 1e3, p->prefill_one_s,
        p->throughput);
    plans.push_back(*std::move(p));
  }
  absl::StatusOr<FamilyPlan> best = planner::PlanScheInfer({&m, &hw, &w});
  ASSERT_TRUE(best.ok()) << best.status();
  for (const BatchPlan& p : plans) {
    EXPECT_GE(best->policy.prediction().throughput_tokens_per_s(),
              p.throughput * (1 - 1e-12));
  }
  // A larger batch reads the same weights once for more tokens: steps grow
  // slower than the batch, and here the SLO sits between batch 4 and 8.
  ASSERT_LT(plans[2].decode_step_s, plans[3].decode_step_s);
  w.objective = Objective::kThroughputUnderItlSlo;
  w.slo_itl_s = (plans[2].decode_step_s + plans[3].decode_step_s) / 2;
  absl::StatusOr<FamilyPlan> slo = planner::PlanScheInfer({&m, &hw, &w});
  ASSERT_TRUE(slo.ok()) << slo.status();
  EXPECT_EQ(slo->policy.batch_size(), 4);
  EXPECT_LE(slo->policy.prediction().inter_token_latency_seconds(),
            w.slo_itl_s);
  // An SLO nothing meets: the lowest-latency plan, said so.
  w.slo_itl_s = plans[0].decode_step_s / 2;
  slo = planner::PlanScheInfer({&m, &hw, &w});
  ASSERT_TRUE(slo.ok()) << slo.status();
  EXPECT_EQ(slo->policy.batch_size(), 1);
  EXPECT_THAT(slo->policy.rationale(), HasSubstr("misses the ITL SLO"));
}

// Mixtral-8x7B 4-bit at 12 GB (the paper's cap): experts are split; one
// decode step at batch 1 runs the 2 routed experts' 6 GEMMs per layer.
TEST(PlanScheInferTest, MixtralExperts) {
  const ModelCost m = Cost(Mixtral8x7B());
  const HardwareProfile hw = TestbedA().WithGpuMemory(12'000'000'000);
  Workload w = PaperWorkload();
  w.max_batch = 1;
  absl::StatusOr<FamilyPlan> plan = planner::PlanScheInfer({&m, &hw, &w});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::printf("%s\n", plan->policy.rationale().c_str());
  ASSERT_EQ(plan->policy.layers_size(), 32);
  int l0_gemms = 0;
  for (const Task& t : plan->decode_step.tasks()) {
    if (t.name.rfind("L0 experts gemm ", 0) == 0 &&
        t.name.find(" launch") == std::string::npos &&
        t.name.find(" copy") == std::string::npos &&
        t.name.find(" cpu") == std::string::npos) {
      ++l0_gemms;
    }
  }
  EXPECT_EQ(l0_gemms, 6);
  EXPECT_EQ(DecodeLayerWork(m, hw, 0, 1, 1000).shape.num_gemms, 6);
  // 64 tokens route to all 8 experts.
  EXPECT_EQ(DecodeLayerWork(m, hw, 0, 64, 1000).shape.num_gemms, 24);
}

// A model that fits (48 GB holds the 35 GB of 4-bit LLaMA-2-70B): nothing
// is streamed — a copy is never worth it when the bytes can stay — but
// Stage 2 still leaves ~1/8 of each MLP on the CPU, because the CPU's
// 92.6 GB/s reads its CC share while the GPU's 617 GB/s reads the rest
// (ideal CPU share 92.6 / (617 + 92.6) = 13%; the grid gives 4/32 = 12.5%):
// "higher r_GG is not always faster". With one CPU thread (5.8 GB/s) the
// CPU share no longer pays for its call and layer sync, and everything is GG.
TEST(PlanScheInferTest, ModelThatFits) {
  const ModelCost m = Cost(Llama2_70B());
  Workload w = PaperWorkload();
  w.max_batch = 1;
  const HardwareProfile hw = TestbedA();
  absl::StatusOr<FamilyPlan> plan = planner::PlanScheInfer({&m, &hw, &w});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::printf("%s\n", plan->policy.rationale().c_str());
  for (const proto::LayerPolicy& l : plan->policy.layers()) {
    EXPECT_EQ(l.cg_fraction(), 0);
    EXPECT_NEAR(l.cc_fraction(), 0.125, 1e-12);
  }
  EXPECT_EQ(plan->decode_sim.busy(Resource::kH2d), 0);

  absl::StatusOr<HardwareProfile> one = hw.WithCpuThreads(1);
  ASSERT_TRUE(one.ok());
  plan = planner::PlanScheInfer({&m, &*one, &w});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const proto::LayerPolicy& l : plan->policy.layers()) {
    EXPECT_EQ(l.gg_fraction(), 1);
    EXPECT_EQ(l.cg_fraction(), 0);
    EXPECT_EQ(l.cc_fraction(), 0);
  }
  EXPECT_EQ(plan->decode_sim.busy(Resource::kH2d), 0);
  EXPECT_EQ(plan->decode_sim.busy(Resource::kCpu), 0);
  EXPECT_TRUE(plan->policy.ffn_on_gpu());
  EXPECT_EQ(plan->policy.prediction().cpu_memory_bytes(), 0);
  EXPECT_EQ(plan->policy.prefill_gpu_tokens(), 0);  // no CC share to split
}

// Fewer CPU threads: the plan moves weight from CC to CG.
TEST(PlanScheInferTest, FewerThreadsStreamMore) {
  const ModelCost m = Cost(Llama2_70B());
  Workload w = PaperWorkload();
  w.max_batch = 1;
  double prev_cg = -1;
  for (int t : {16, 4}) {
    absl::StatusOr<HardwareProfile> hw =
        TestbedA().WithGpuMemory(24'000'000'000).WithCpuThreads(t);
    ASSERT_TRUE(hw.ok());
    absl::StatusOr<FamilyPlan> plan = planner::PlanScheInfer({&m, &*hw, &w});
    ASSERT_TRUE(plan.ok()) << plan.status();
    double cg = 0;
    for (const proto::LayerPolicy& l : plan->policy.layers())
      cg += l.cg_fraction();
    EXPECT_GT(cg, prev_cg);
    prev_cg = cg;
  }
}

// PlanScheInfer times every batch's steps on a StreamClock and builds only
// the chosen batch's graph; PlanBatch builds every graph. The step time each
// reports is the graph's makespan to the last bit, and PlanScheInfer's
// policy is PlanBatch's plan at the batch it chose.
TEST(PlanScheInferTest, ClockTimingIsTheGraphsAndPlansMatchPlanBatch) {
  struct Case {
    ModelConfig config;
    int64_t gpu_bytes;
  };
  for (const Case& c : {Case{Llama2_70B(), 24'000'000'000},
                        Case{Mixtral8x7B(), 12'000'000'000}}) {
    const ModelCost m = Cost(c.config);
    const HardwareProfile hw = TestbedA().WithGpuMemory(c.gpu_bytes);
    Workload w = PaperWorkload();
    w.max_batch = 16;
    for (int64_t b = 1; b <= 16; b *= 2) {
      absl::StatusOr<BatchPlan> p = PlanBatch({&m, &hw, &w}, b);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->decode_step_s, p->decode_sim.makespan_s) << "batch " << b;
    }
    absl::StatusOr<FamilyPlan> plan = planner::PlanScheInfer({&m, &hw, &w});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const proto::Policy& pol = plan->policy;
    absl::StatusOr<BatchPlan> p = PlanBatch({&m, &hw, &w}, pol.batch_size());
    ASSERT_TRUE(p.ok()) << p.status();
    const proto::Prediction& pr = pol.prediction();
    EXPECT_EQ(pr.decode_step_seconds(), p->decode_step_s);
    EXPECT_EQ(pr.throughput_tokens_per_s(), p->throughput);
    EXPECT_EQ(pr.prefill_seconds(), pol.batch_size() * p->prefill_one_s);
    EXPECT_EQ(pol.prefill_gpu_tokens(), p->prefill_gpu_tokens);
    EXPECT_EQ(plan->decode_sim.makespan_s, p->decode_sim.makespan_s);
    EXPECT_EQ(plan->decode_step.size(), p->decode_step.size());
    ASSERT_EQ(pol.layers_size(), static_cast<int>(p->splits.size()));
    for (int l = 0; l < pol.layers_size(); ++l) {
      EXPECT_EQ(pol.layers(l).gg_fraction(), p->splits[l].gg);
      EXPECT_EQ(pol.layers(l).cg_fraction(), p->splits[l].cg);
      EXPECT_EQ(pol.layers(l).cc_fraction(), p->splits[l].cc);
    }
  }
}

TEST(PlanScheInferTest, Errors) {
  const ModelCost m = Cost(Llama2_70B());
  const Workload w = PaperWorkload();
  HardwareProfile hw = TestbedA();
  EXPECT_EQ(planner::PlanScheInfer({nullptr, &hw, &w}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Workload bad = w;
  bad.gen_len = 0;
  EXPECT_EQ(planner::PlanScheInfer({&m, &hw, &bad}).status().code(),
            absl::StatusCode::kInvalidArgument);
  HardwareProfile no_gpu = hw;
  no_gpu.gpu.count = 0;
  absl::Status s = planner::PlanScheInfer({&m, &no_gpu, &w}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("GPU"));
  // 4 GB cannot hold 5.6 GB of resident attention weights.
  const HardwareProfile small = hw.WithGpuMemory(4'000'000'000);
  s = planner::PlanScheInfer({&m, &small, &w}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("resident"));
  // 8 GB of host memory cannot hold the ~11.6 GB of MLP weights that do not
  // fit on a 24 GB GPU.
  HardwareProfile tiny_host = hw.WithGpuMemory(24'000'000'000);
  tiny_host.cpu.memory_bytes = 8'000'000'000;
  s = planner::PlanScheInfer({&m, &tiny_host, &w}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("host memory"));
  EXPECT_EQ(PlanBatch({&m, &hw, &w}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::planner::scheinfer
