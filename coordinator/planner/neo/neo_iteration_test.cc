#include "coordinator/planner/neo/neo_iteration.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::neo {
namespace {

// Linear cost functions (the unit is ms; the function is unit-free).
IterationCosts Linear(double lin0, double lin_per_row, double gpu_per_key,
                      double pref_per_tok, double cpu0, double cpu_per_key) {
  IterationCosts c;
  c.gpu_linear_s = [=](int64_t s) {
    return lin0 + lin_per_row * static_cast<double>(s);
  };
  c.gpu_decode_attention_s = [=](int64_t, int64_t n) {
    return gpu_per_key * static_cast<double>(n);
  };
  c.gpu_prefill_attention_s = [=](int64_t p) {
    return pref_per_tok * static_cast<double>(p);
  };
  c.cpu_decode_attention_s = [=](int64_t, int64_t n) {
    return cpu0 + cpu_per_key * static_cast<double>(n);
  };
  return c;
}

TEST(NeoIteration, PipelineWinsWorkedExample) {
  // T_l(S) = 1 + 0.005·S, T_gdec = 0.001·N, T_pref = 0.002·p,
  // T_cdec = 0.1 + 0.001·N. Batch-0 starts with the prefill (200 tokens) and
  // 4 GPU decodes of 100: S0 = 204, T_l0 = 2.02, T_ga0 = 0.4 + 0.4 = 0.8.
  // CPU decodes, FCFS (slack1 = T_l0 − T_ca1, slack0 = T_l1 + T_ga0 − T_ca0):
  //  R1 (400): 2.02 ≥ 0.8 -> b1: T_l1 1.005, T_ca1 0.5; slacks 1.52 / 1.805
  //  R2 (400): b0: T_l0 2.025, T_ca0 0.5; slack1 1.525, slack0 1.305
  //  R3 (400): b1: T_l1 1.01, T_ca1 0.9; slack1 1.125, slack0 1.31
  //  R4 (400): b0: T_l0 2.03, T_ca0 0.9; slack1 1.13, slack0 0.91
  //  R5 (400): b1: T_l1 1.015, T_ca1 1.3; slack1 0.73, slack0 0.915
  //  R6 (400): b0: T_l0 2.035, T_ca0 1.3; slack1 0.735, slack0 0.515
  //  R7 (1200): b1 -> T_ca1 2.5, slack1 −0.465; b0 -> T_ca0 2.5, slack0
  //             −0.685: waits, and so do later requests of context ≥ 1200
  //  R8 (1300): waits without a try
  //  R9 (100): b1: T_l1 1.02, T_ca1 1.4; slack1 0.635, slack0 0.52
  // T_layer = max(2.035, 1.4) + max(1.02 + 0.8, 1.3) = 3.855 for 12
  // requests; GPU-only: 2.02 + 0.8 = 2.82 for 5. Rates (1 layer): 3.113
  // vs 1.773.
  const std::vector<PrefillRequest> prefills = {{100, 200}};
  std::vector<DecodeRequest> decodes;
  for (int64_t i = 0; i < 4; ++i) {
    decodes.push_back({10 + i, 100, KvLocation::kGpu});
  }
  for (int64_t i = 1; i <= 6; ++i) {
    decodes.push_back({i, 400, KvLocation::kCpu});
  }
  decodes.push_back({7, 1200, KvLocation::kCpu});
  decodes.push_back({8, 1300, KvLocation::kCpu});
  decodes.push_back({9, 100, KvLocation::kCpu});
  auto p = PlanIteration(prefills, decodes,
                         Linear(1.0, 0.005, 0.001, 0.002, 0.1, 0.001), 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->pipelined);
  EXPECT_EQ(p->batch0.prefill_ids, (std::vector<int64_t>{100}));
  EXPECT_EQ(p->batch0.gpu_decode_ids, (std::vector<int64_t>{10, 11, 12, 13}));
  EXPECT_EQ(p->batch0.cpu_decode_ids, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(p->batch1.cpu_decode_ids, (std::vector<int64_t>{1, 3, 5, 9}));
  EXPECT_EQ(p->deferred_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(p->cpu_attention_ids, (std::vector<int64_t>{2, 4, 6, 1, 3, 5, 9}));
  EXPECT_NEAR(p->batch0.linear_s, 2.035, 1e-12);
  EXPECT_NEAR(p->batch0.gpu_attention_s, 0.8, 1e-12);
  EXPECT_NEAR(p->batch0.cpu_attention_s, 1.3, 1e-12);
  EXPECT_NEAR(p->batch1.linear_s, 1.02, 1e-12);
  EXPECT_NEAR(p->batch1.cpu_attention_s, 1.4, 1e-12);
  EXPECT_NEAR(p->slack1_s, 0.635, 1e-12);
  EXPECT_NEAR(p->slack0_s, 0.52, 1e-12);
  EXPECT_NEAR(p->pipelined_iteration_s, 3.855, 1e-12);
  EXPECT_NEAR(p->gpu_only_iteration_s, 2.82, 1e-12);
  EXPECT_EQ(p->requests_run(), 12);
  EXPECT_NEAR(p->pipelined_rate, 12 / 3.855, 1e-12);
  EXPECT_NEAR(p->gpu_only_rate, 5 / 2.82, 1e-12);
  EXPECT_NEAR(p->iteration_s(), 3.855, 1e-12);
}

TEST(NeoIteration, GpuOnlyWinsWhenTooLittleCanBeHidden) {
  // T_l(S) = 2 + 0.01·S, T_gdec = 0.0001·N, T_cdec = 0.5 + 0.002·N.
  // 10 GPU decodes of 100: T_l0 2.1, T_ga0 0.1. CPU decodes of 500 (1.0 each):
  //  A: b1 (2.1 ≥ 0.1): T_l1 2.01, T_ca1 1.5; slack1 0.6, slack0 2.11
  //  B: b0: T_l0 2.11, T_ca0 1.5; slack1 0.61, slack0 0.61
  //  C: tie -> b1: T_ca1 2.5, slack1 −0.39; b0: T_ca0 2.5, slack0 −0.39: waits
  //  D: context 500 ≥ 500: waits
  // Asymmetric: 2.11 + max(2.01 + 0.1, 1.5) = 4.22 for 12 -> 2.84/ms;
  // GPU-only: 2.2 for 10 -> 4.55/ms. The second sub-batch's weight pass
  // costs more than the two CPU requests bring: GPU-only runs, all four wait.
  std::vector<DecodeRequest> decodes;
  for (int64_t i = 0; i < 10; ++i) {
    decodes.push_back({100 + i, 100, KvLocation::kGpu});
  }
  for (int64_t i = 0; i < 4; ++i) decodes.push_back({i, 500, KvLocation::kCpu});
  auto p = PlanIteration({}, decodes,
                         Linear(2.0, 0.01, 0.0001, 0.001, 0.5, 0.002), 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->pipelined);
  EXPECT_EQ(p->batch1.cpu_decode_ids, (std::vector<int64_t>{0}));
  EXPECT_EQ(p->batch0.cpu_decode_ids, (std::vector<int64_t>{1}));
  EXPECT_NEAR(p->slack0_s, 0.61, 1e-12);
  EXPECT_NEAR(p->slack1_s, 0.61, 1e-12);
  EXPECT_NEAR(p->pipelined_iteration_s, 2 * 4.22, 1e-12);
  EXPECT_NEAR(p->gpu_only_iteration_s, 2 * 2.2, 1e-12);
  EXPECT_TRUE(p->cpu_attention_ids.empty());
  EXPECT_EQ(p->deferred_ids, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(p->requests_run(), 10);
  EXPECT_EQ(p->gpu_only.gpu_decode_ids.size(), 10u);
  EXPECT_TRUE(p->gpu_only.cpu_decode_ids.empty());
}

TEST(NeoIteration, StarvationGuardRunsCpuRequestsWithoutGpuWork) {
  // No prefill, no GPU decode: nothing to hide CPU attention under. Both CPU
  // requests (400 each) run unhidden in batch-1:
  // T = max(0, T_ca1) + max(T_l1, 0) = (0.1 + 0.8) + (1 + 0.005·2) = 1.91.
  const std::vector<DecodeRequest> decodes = {{1, 400, KvLocation::kCpu},
                                              {2, 400, KvLocation::kCpu}};
  auto p = PlanIteration({}, decodes,
                         Linear(1.0, 0.005, 0.001, 0.002, 0.1, 0.001), 1);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->starvation_guard);
  EXPECT_TRUE(p->pipelined);
  EXPECT_EQ(p->batch1.cpu_decode_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_NEAR(p->pipelined_iteration_s, 1.91, 1e-12);
  EXPECT_EQ(p->gpu_only_rate, 0);
}

TEST(NeoIteration, NoCpuRequestsIsGpuOnly) {
  const std::vector<DecodeRequest> decodes = {{1, 50, KvLocation::kGpu}};
  auto p = PlanIteration({{2, 30}}, decodes,
                         Linear(1.0, 0.005, 0.001, 0.002, 0.1, 0.001), 3);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->pipelined);
  // T_l(31) = 1.155, T_ga = 0.05 + 0.06 = 0.11 -> 3 · 1.265.
  EXPECT_NEAR(p->gpu_only_iteration_s, 3 * 1.265, 1e-12);
  EXPECT_EQ(p->requests_run(), 2);
}

TEST(NeoIteration, RejectsBadInput) {
  const IterationCosts ok = Linear(1, 0, 0, 0, 0, 0);
  EXPECT_EQ(
      PlanIteration({}, {{1, 0, KvLocation::kGpu}}, ok, 1).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanIteration({{1, 5}}, {{1, 5, KvLocation::kGpu}}, ok, 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      PlanIteration({}, {{1, 5, KvLocation::kGpu}}, ok, 0).status().code(),
      absl::StatusCode::kInvalidArgument);
  IterationCosts missing = ok;
  missing.cpu_decode_attention_s = nullptr;
  EXPECT_EQ(
      PlanIteration({}, {{1, 5, KvLocation::kGpu}}, missing, 1).status().code(),
      absl::StatusCode::kInvalidArgument);
  IterationCosts negative = ok;
  negative.gpu_linear_s = [](int64_t) { return -1.0; };
  EXPECT_EQ(PlanIteration({}, {{1, 5, KvLocation::kGpu}}, negative, 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::neo
