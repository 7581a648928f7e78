#include "coordinator/planner/scheinfer/prefill_assignment.h"

#include <vector>

#include "coordinator/planner/scheinfer/cost_model.h"
#include "coordinator/planner/scheinfer/rate_solver.h"
#include "coordinator/planner/scheinfer/test_fixtures.h"
#include "gtest/gtest.h"

namespace tandem::planner::scheinfer {
namespace {

using testing::Llama2_70B;
using testing::Mixtral8x7B;
using testing::TestbedA;

std::vector<RunningMlpSplit> Uniform(const ModelConfig& c, double cc, bool streamed) {
  return std::vector<RunningMlpSplit>(static_cast<size_t>(c.num_layers), {cc, streamed});
}

// Every layer with the same split is one group of Eq. 15: the answer is
// SolvePrefillTokens on that group, counted num_layers times.
TEST(PrefillAssigner, IsEq15OnTheRunningSplit) {
  const ModelConfig c = Llama2_70B();
  const HardwareProfile hw = TestbedA();
  for (bool streamed : {false, true}) {
    auto a = PrefillAssigner::Create(c, hw, Uniform(c, 0.5, streamed));
    ASSERT_TRUE(a.ok()) << a.status();
    for (int64_t t : {16, 64, 256, 1024, 4096}) {
      auto got = a->GpuTokens(t);
      ASSERT_TRUE(got.ok()) << got.status();
      auto m = ModelCost::Create(c);
      ASSERT_TRUE(m.ok());
      auto model = CostModelFromProfile(hw, m->options().weight_bytes_per_element, t);
      ASSERT_TRUE(model.ok());
      const Split split{streamed ? 0.0 : 0.5, streamed ? 0.5 : 0.0, 0.5};
      const PrefillGroup g{*model, PrefillLayerWork(*m, hw, 0, t).shape, split,
                           static_cast<double>(c.num_layers)};
      auto want = SolvePrefillTokens({g}, t);
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(*got, want->gpu_tokens) << "T=" << t << " streamed=" << streamed;
      EXPECT_GE(*got, 0);
      EXPECT_LE(*got, t);
    }
  }
}

// ScheInfer's finding: longer prompts send more tokens through CG' (the
// copy of the CC weights is paid once per prefill, the CPU's GEMM grows with
// T); short ones keep them on the CPU.
TEST(PrefillAssigner, LongerPromptsSendMoreTokensToTheGpu) {
  const ModelConfig c = Llama2_70B();
  auto a = PrefillAssigner::Create(c, TestbedA(), Uniform(c, 0.5, false));
  ASSERT_TRUE(a.ok()) << a.status();
  int64_t last = 0;
  for (int64_t t : {1, 8, 64, 256, 1024, 4096}) {
    auto n = a->GpuTokens(t);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_GE(*n, last) << "T=" << t;
    last = *n;
  }
  EXPECT_GT(last, 0) << "a 4096-token prompt uses the GPU for some of its CC rows";
  // Asked again: the memoised answer.
  EXPECT_EQ(*a->GpuTokens(4096), last);
}

TEST(PrefillAssigner, NoCcRowsNothingToAssign) {
  const ModelConfig c = Mixtral8x7B();  // MoE layers: their entries are ignored
  auto a = PrefillAssigner::Create(c, TestbedA(), Uniform(c, 0.5, false));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a->GpuTokens(512), 0);
  const ModelConfig d = Llama2_70B();
  auto b = PrefillAssigner::Create(d, TestbedA(), Uniform(d, 0.0, true));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b->GpuTokens(512), 0);
}

TEST(PrefillAssigner, BadInputsAreRefused) {
  const ModelConfig c = Llama2_70B();
  EXPECT_EQ(PrefillAssigner::Create(c, TestbedA(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefillAssigner::Create(c, TestbedA(), Uniform(c, 1.0, false)).status().code(),
            absl::StatusCode::kInvalidArgument);
  HardwareProfile cpu_only = TestbedA();
  cpu_only.gpu.count = 0;
  EXPECT_EQ(PrefillAssigner::Create(c, cpu_only, Uniform(c, 0.5, false)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto a = PrefillAssigner::Create(c, TestbedA(), Uniform(c, 0.5, false));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->GpuTokens(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::planner::scheinfer
