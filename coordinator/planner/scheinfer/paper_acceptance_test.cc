// Acceptance tests against the paper's findings on testbed A (see
// test_fixtures.h for the profile and where each figure comes from). Each
// prints its figures next to the paper's.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/scheinfer/cost_model.h"
#include "coordinator/planner/scheinfer/rate_solver.h"
#include "coordinator/planner/scheinfer/scheinfer_plan.h"
#include "coordinator/planner/scheinfer/test_fixtures.h"
#include "gtest/gtest.h"

namespace tandem::planner::scheinfer {
namespace {

using testing::Llama2_70B;
using testing::Mixtral8x7B;
using testing::PaperWorkload;
using testing::TestbedA;

ModelCost FourBit(const ModelConfig& c) {
  CostOptions o;
  // The paper runs LLaMA-2-70B and Mixtral in 4-bit.
  o.weight_bytes_per_element = 0.5;
  absl::StatusOr<ModelCost> m = ModelCost::Create(c, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// The paper's rate ablation (r_GG = 0, decode, batch 1): its optimal r_CG for
// LLaMA-2-70B at 16/8/4/2 CPU threads was 0.18, 0.25, 0.42, 0.71. Fewer
// threads make the CPU line steeper (β_C = 0.5 B / (T · bandwidth(t))), so
// the CPU/PCIe balance moves toward the copy: r_CG must grow strictly.
//
// What to expect: per GEMM n_W = 8192·28672·0.5 B = 117.4 MB, so at r_CG = x
// the copy takes 3e-6 + x·4.70 ms and the CPU 1.1e-5 + (1 − x)·117.4 MB /
// bandwidth(t) (92.6 GB/s at 16 threads → 1.27 ms, 46.3 → 2.54 ms, 23.1 →
// 5.07 ms, 11.6 → 10.1 ms). The layer is copy-bound, so the optimum is the
// Eq. 10 balance t_L + 3·t_C2G + t_G = 3·t_C, about 1.27 / (4.70 + 1.27) =
// 0.21 at 16 threads, 0.35, 0.52 and 0.68 at 2; the test checks the solver
// against that balance exactly and prints the values.
TEST(PaperAcceptanceTest, FewerCpuThreadsGiveALargerCgShare) {
  const ModelCost m = FourBit(Llama2_70B());
  const double paper[] = {0.18, 0.25, 0.42, 0.71};
  const int threads[] = {16, 8, 4, 2};
  double prev = -1;
  std::printf("LLaMA-2-70B 4-bit, r_GG = 0, batch 1 (testbed A):\n");
  std::printf("  threads  r_CG (ours)  r_CG (paper)  t_fin (ms)  regime\n");
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<HardwareProfile> hw = TestbedA().WithCpuThreads(threads[i]);
    ASSERT_TRUE(hw.ok()) << hw.status();
    const LayerWork lw = DecodeLayerWork(m, *hw, 0, 1, 1024);
    absl::StatusOr<CostModel> cm =
        CostModelFromProfile(*hw, 0.5, lw.shape.tokens);
    ASSERT_TRUE(cm.ok()) << cm.status();
    absl::StatusOr<Stage1Result> r = SolveStage1(*cm, lw.shape, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    std::printf("  %7d  %11.3f  %12.2f  %10.3f  %s\n", threads[i], r->r_cg,
                paper[i], r->t_fin * 1e3,
                std::string(RegimeName(r->regime)).c_str());
    EXPECT_GT(r->r_cg, prev) << threads[i] << " threads";
    prev = r->r_cg;
    // The Eq. 10 balance τ_G = τ_C solved directly (n = n_GEMM, W = n_W,
    // r_GG = 0 so t_L = 2·t_Launch):
    //   2·t_Launch + 3·(α_p + x·W·β_p) + α_G + x·n·β_G
    //     = 3·(α_C + (1 − x)·n·β_C)
    ASSERT_EQ(r->regime, Regime::kCopyBound);
    const double n = lw.shape.n_gemm(), w = lw.shape.weight_bytes;
    const double x =
        (3 * cm->cpu.alpha + 3 * n * cm->cpu.beta - 2 * cm->launch_s -
         3 * cm->h2d.alpha - cm->gpu.alpha) /
        (3 * w * cm->h2d.beta + n * cm->gpu.beta + 3 * n * cm->cpu.beta);
    EXPECT_NEAR(r->r_cg, x, 1e-9);
    // Within reach of the paper's figure (its profile is not ours: PCIe and
    // per-thread rates are estimates, see test_fixtures.h).
    EXPECT_NEAR(r->r_cg, paper[i], 0.15) << threads[i] << " threads";
  }
}

// Stage 2 spends the budget: the model on testbed A at a sweep of GPU memory
// caps. A larger budget never gives a slower predicted decode step, the GG
// bytes never exceed what Stage 2 could spend, and what is left unspent is
// less than one grid step of a layer (n_m / n_G) — unless more GPU memory
// would not help at all: then the step equals the step of a GPU with memory
// to spare (the CPU reading its CC share in parallel beats keeping that share
// on the GPU, so Stage 2 stops short of r_GG = 1 by design).
void BudgetSweep(const ModelConfig& config, const char* name, double from_gb,
                 double to_gb, double step_gb) {
  const ModelCost m = FourBit(config);
  const Workload w = PaperWorkload();
  std::printf(
      "%s 4-bit, batch 1 (testbed A): GPU cap -> GG budget, GG bytes, decode "
      "step\n",
      name);
  HardwareProfile unlimited = TestbedA();
  unlimited.gpu.memory_bytes = 1'000'000'000'000;
  absl::StatusOr<BatchPlan> best = PlanBatch({&m, &unlimited, &w}, 1);
  ASSERT_TRUE(best.ok()) << best.status();
  std::printf("  unlimited: GG %6.2f GB of %6.2f GB, step %8.3f ms\n",
              best->gg_bytes / 1e9, best->gg_budget_bytes / 1e9,
              best->decode_step_s * 1e3);
  double prev = std::numeric_limits<double>::infinity();
  int plans = 0, saturated = 0;
  for (double gb = from_gb; gb <= to_gb + 1e-9; gb += step_gb) {
    const HardwareProfile hw =
        TestbedA().WithGpuMemory(static_cast<int64_t>(gb * 1e9));
    PlanInput in{&m, &hw, &w};
    absl::StatusOr<BatchPlan> p = PlanBatch(in, 1);
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition)
          << p.status();
      std::printf("  %5.1f GB: does not fit (%s)\n", gb,
                  std::string(p.status().message()).c_str());
      EXPECT_EQ(plans, 0) << "a larger GPU must not stop fitting";
      continue;
    }
    ++plans;
    std::printf(
        "  %5.1f GB: budget %6.2f GB, GG %6.2f GB, step %8.3f ms, %s\n", gb,
        p->gg_budget_bytes / 1e9, p->gg_bytes / 1e9, p->decode_step_s * 1e3,
        p->all_gg ? "all GG" : std::string(RegimeName(p->regime)).c_str());
    EXPECT_LE(p->gg_bytes, p->gg_budget_bytes);
    EXPECT_LE(p->gpu_bytes, gb * 1e9);
    EXPECT_LE(p->decode_step_s, prev * (1 + 1e-12)) << gb << " GB";
    prev = p->decode_step_s;
    double step_bytes = 0;
    for (int64_t l = 0; l < config.num_layers; ++l) {
      step_bytes =
          std::max(step_bytes, SliceableBytes(m, l) / kDefaultGridSteps);
    }
    EXPECT_GE(p->decode_step_s, best->decode_step_s * (1 - 1e-12));
    if (p->gg_budget_bytes - p->gg_bytes >= step_bytes) {
      EXPECT_NEAR(p->decode_step_s, best->decode_step_s,
                  1e-12 * best->decode_step_s)
          << gb << " GB: budget left unspent although more memory would help";
      ++saturated;
    }
  }
  EXPECT_GT(plans, 3);
  EXPECT_LT(saturated, plans) << "the sweep must include budgets that bind";
}

TEST(PaperAcceptanceTest, LargerBudgetNeverSlowerLlama) {
  BudgetSweep(Llama2_70B(), "LLaMA-2-70B", 8, 48, 2);
}

TEST(PaperAcceptanceTest, LargerBudgetNeverSlowerMixtral) {
  BudgetSweep(Mixtral8x7B(), "Mixtral-8x7B", 2, 30, 1);
}

// Token assignment: at the decode split (24 GB, the paper's LLaMA-2-70B cap),
// longer prompts send more tokens to the GPU, and a larger share of them: the
// CG′ copy of a layer's CC bytes costs the same whatever T is, so the CPU
// keeps about the tokens it can finish while that copy runs and the rest go
// to the GPU (rate_solver_test derives this by hand). The paper measured
// prefill speedups of 6.9x, 27.6x, 45.6x with token assignment on vs off at
// 64, 256, 1024 tokens.
TEST(PaperAcceptanceTest, TokenAssignmentGrowsWithThePrompt) {
  const ModelCost m = FourBit(Llama2_70B());
  const HardwareProfile hw = TestbedA().WithGpuMemory(24'000'000'000);
  std::printf("LLaMA-2-70B 4-bit at 24 GB: prefill token assignment\n");
  std::printf(
      "  T      n_g    n_g/T   prefill on (s)  off (s)  speedup  paper\n");
  const int64_t prompts[] = {16, 64, 256, 1024, 4096};
  const char* paper[] = {"-", "6.9x", "27.6x", "45.6x", "-"};
  int64_t prev = -1;
  double prev_fraction = -1;
  for (int i = 0; i < 5; ++i) {
    const Workload w = PaperWorkload(prompts[i]);
    PlanInput in{&m, &hw, &w};
    absl::StatusOr<BatchPlan> p = PlanBatch(in, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    const double fraction =
        static_cast<double>(p->prefill_gpu_tokens) / prompts[i];
    std::printf("  %-5lld  %5lld  %6.3f  %14.3f  %7.3f  %6.1fx  %s\n",
                static_cast<long long>(prompts[i]),
                static_cast<long long>(p->prefill_gpu_tokens), fraction,
                p->prefill_one_s, p->prefill_one_cpu_only_s,
                p->prefill_one_cpu_only_s / p->prefill_one_s, paper[i]);
    EXPECT_GE(p->prefill_gpu_tokens, prev);
    EXPECT_GE(fraction, prev_fraction - 1e-12);
    EXPECT_LE(p->prefill_one_s, p->prefill_one_cpu_only_s);
    prev = p->prefill_gpu_tokens;
    prev_fraction = fraction;
  }
  // Long prompts strictly more than short ones.
  EXPECT_GT(prev, 0);
}

}  // namespace
}  // namespace tandem::planner::scheinfer
