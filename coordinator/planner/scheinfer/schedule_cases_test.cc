// Acceptance: the simulator reproduces ScheInfer's three schedule cases
// (Fig. 5, Eqs. 10–12) on hand-made cost models.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "coordinator/planner/scheinfer/cost_model.h"
#include "gtest/gtest.h"

namespace tandem::planner::scheinfer {
namespace {

constexpr double kExact = 1e-9;

// Four GEMMs of 1e6 one-byte elements, one row: n_GEMM = n_W = 1e6.
GemmShape Shape() {
  GemmShape s;
  s.num_gemms = 4;
  s.elements = 1e6;
  s.weight_bytes = 1e6;
  s.tokens = 1;
  return s;
}

// The base model: t_Launch = 1e-5; PCIe α = 2e-6, β = 1e-9 s/B; GPU α = 1e-6,
// β = 1e-10; CPU α = 1e-6, β = 1e-9. Split gg = 0.5, cg = 0.3, cc = 0.2.
CostModel Base() {
  CostModel m;
  m.launch_s = 1e-5;
  m.h2d = {2e-6, 1e-9};
  m.gpu = {1e-6, 1e-10};
  m.cpu = {1e-6, 1e-9};
  return m;
}
constexpr Split kSplit{0.5, 0.3, 0.2};

struct Simulated {
  double gpu_finish = 0;  // τ_G^{n_l}
  double t_fin = 0;
  double two_layer_step = 0;
  SimResult one_layer;
};

// One layer alone, and a step of two such layers where the second starts
// when the first has finished on the GPU and the CPU (the planner's layer
// sync).
Simulated RunLayers(const StreamTimes& t, int n) {
  Simulated out;
  StepGraph g;
  MlpTasks l0 = AppendMlpTasks(&g, "L0", t, n, {}, {});
  absl::StatusOr<SimResult> r = Simulate(g);
  EXPECT_TRUE(r.ok()) << r.status();
  out.one_layer = *r;
  out.gpu_finish = r->timings[l0.last_gpu].end_s;
  out.t_fin = r->makespan_s;
  std::vector<TaskId> done = {l0.last_gpu};
  if (l0.last_cpu >= 0) done.push_back(l0.last_cpu);
  AppendMlpTasks(&g, "L1", t, n, done, done);
  absl::StatusOr<SimResult> step = Simulate(g);
  EXPECT_TRUE(step.ok()) << step.status();
  out.two_layer_step = step->makespan_s;
  return out;
}

// Case 1, PCIe-bound (Q1: t_L < t_C2G and Q2: t_G < t_C2G):
//   t_L   = (2 + 1)·1e-5              = 3.0e-5
//   t_C2G = 2e-6 + 0.3·1e6·1e-9        = 3.02e-4
//   t_G   = 2·1e-6 + 0.8·1e6·1e-10     = 8.2e-5
//   t_C   = 1e-6 + 0.2·1e6·1e-9        = 2.01e-4
//   Eq. 10: τ_G = t_L + n_l·t_C2G + t_G = 3e-5 + 4·3.02e-4 + 8.2e-5 = 1.320e-3
//   τ_C = 4·2.01e-4 = 8.04e-4 → t_fin = 1.320e-3; two layers 2.640e-3.
//   The copy stream is busy 4·3.02e-4 = 1.208e-3: the bottleneck.
TEST(ScheduleCasesTest, CopyBound) {
  const StreamTimes t = DecodeStreamTimes(Base(), Shape(), kSplit);
  EXPECT_NEAR(t.launch, 3.0e-5, kExact);
  EXPECT_NEAR(t.copy, 3.02e-4, kExact);
  EXPECT_NEAR(t.gpu, 8.2e-5, kExact);
  EXPECT_NEAR(t.cpu, 2.01e-4, kExact);
  EXPECT_EQ(ClassifyRegime(t), Regime::kCopyBound);
  const Simulated s = RunLayers(t, 4);
  EXPECT_NEAR(s.gpu_finish, 1.320e-3, kExact);
  EXPECT_NEAR(s.t_fin, 1.320e-3, kExact);
  EXPECT_NEAR(s.two_layer_step, 2.640e-3, kExact);
  EXPECT_NEAR(s.one_layer.busy(Resource::kH2d), 1.208e-3, kExact);
  EXPECT_EQ(s.one_layer.bottleneck(), Resource::kH2d);
  EXPECT_NEAR(ClosedFormLayerTime(t, 4), 1.320e-3, kExact);
  std::printf(
      "copy-bound:   t_fin = %.6g s (Eq. 10: 1.320e-3), step of 2 layers %.6g "
      "s\n",
      s.t_fin, s.two_layer_step);
}

// Case 2, GPU-bound (Q1 and not Q2): the GPU ten times slower, β_G = 1e-9:
//   t_G = 2e-6 + 0.8·1e6·1e-9 = 8.02e-4 > t_C2G = 3.02e-4 > t_L = 3e-5
//   Eq. 11: τ_G = t_L + t_C2G + n_l·t_G = 3e-5 + 3.02e-4 + 4·8.02e-4 = 3.540e-3
//   τ_C = 8.04e-4 → t_fin = 3.540e-3; two layers 7.080e-3; GPU busy 3.208e-3.
TEST(ScheduleCasesTest, GpuBound) {
  CostModel m = Base();
  m.gpu.beta = 1e-9;
  const StreamTimes t = DecodeStreamTimes(m, Shape(), kSplit);
  EXPECT_NEAR(t.gpu, 8.02e-4, kExact);
  EXPECT_EQ(ClassifyRegime(t), Regime::kGpuBound);
  const Simulated s = RunLayers(t, 4);
  EXPECT_NEAR(s.gpu_finish, 3.540e-3, kExact);
  EXPECT_NEAR(s.t_fin, 3.540e-3, kExact);
  EXPECT_NEAR(s.two_layer_step, 7.080e-3, kExact);
  EXPECT_NEAR(s.one_layer.busy(Resource::kGpu), 3.208e-3, kExact);
  EXPECT_EQ(s.one_layer.bottleneck(), Resource::kGpu);
  std::printf(
      "GPU-bound:    t_fin = %.6g s (Eq. 11: 3.540e-3), step of 2 layers %.6g "
      "s\n",
      s.t_fin, s.two_layer_step);
}

// Case 2 by its other branch (not Q1, Q3): launches slower than copies but
// faster than GEMMs. t_Launch = 2e-4 → t_L = 6e-4; β_G = 1e-9 → t_G = 8.02e-4:
//   τ_G = t_L + t_C2G + n_l·t_G = 6e-4 + 3.02e-4 + 3.208e-3 = 4.110e-3.
TEST(ScheduleCasesTest, GpuBoundBehindSlowLaunches) {
  CostModel m = Base();
  m.launch_s = 2e-4;
  m.gpu.beta = 1e-9;
  const StreamTimes t = DecodeStreamTimes(m, Shape(), kSplit);
  EXPECT_EQ(ClassifyRegime(t), Regime::kGpuBound);
  const Simulated s = RunLayers(t, 4);
  EXPECT_NEAR(s.gpu_finish, 4.110e-3, kExact);
  EXPECT_NEAR(s.two_layer_step, 8.220e-3, kExact);
}

// Case 3, launch-bound (neither Q1 nor Q3): t_Launch = 2e-4 → t_L = 6e-4 >
// t_C2G = 3.02e-4 and > t_G = 8.2e-5:
//   Eq. 12: τ_G = n_l·t_L + t_C2G + t_G = 2.4e-3 + 3.02e-4 + 8.2e-5 = 2.784e-3
//   τ_C = 8.04e-4 → t_fin = 2.784e-3; two layers 5.568e-3; launch busy 2.4e-3.
TEST(ScheduleCasesTest, LaunchBound) {
  CostModel m = Base();
  m.launch_s = 2e-4;
  const StreamTimes t = DecodeStreamTimes(m, Shape(), kSplit);
  EXPECT_NEAR(t.launch, 6e-4, kExact);
  EXPECT_EQ(ClassifyRegime(t), Regime::kLaunchBound);
  const Simulated s = RunLayers(t, 4);
  EXPECT_NEAR(s.gpu_finish, 2.784e-3, kExact);
  EXPECT_NEAR(s.t_fin, 2.784e-3, kExact);
  EXPECT_NEAR(s.two_layer_step, 5.568e-3, kExact);
  EXPECT_NEAR(s.one_layer.busy(Resource::kLaunch), 2.4e-3, kExact);
  EXPECT_EQ(s.one_layer.bottleneck(), Resource::kLaunch);
  std::printf(
      "launch-bound: t_fin = %.6g s (Eq. 12: 2.784e-3), step of 2 layers %.6g "
      "s\n",
      s.t_fin, s.two_layer_step);
}

// When the CPU is the slow side, t_fin is τ_C: cc = 0.6 (gg 0.2, cg 0.2),
//   t_C = 1e-6 + 0.6·1e-3 = 6.01e-4 → τ_C = 4·6.01e-4 = 2.404e-3;
//   τ_G (copy-bound) = 3e-5 + 4·(2e-6 + 2e-4) + (2e-6 + 4e-5) = 8.8e-4.
TEST(ScheduleCasesTest, CpuSideFinishesLast) {
  const StreamTimes t = DecodeStreamTimes(Base(), Shape(), {0.2, 0.2, 0.6});
  const Simulated s = RunLayers(t, 4);
  EXPECT_NEAR(s.gpu_finish, 8.8e-4, kExact);
  EXPECT_NEAR(s.t_fin, 2.404e-3, kExact);
  EXPECT_NEAR(ClosedFormLayerTime(t, 4), 2.404e-3, kExact);
}

// The unified closed form, t_L + t_C2G + t_G + (n_l − 1)·max(...), equals the
// simulated GPU finish for any stream times (a flow shop of identical jobs).
TEST(ClosedFormTest, MatchesTheSimulatorEverywhere) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1e-3);
  for (int trial = 0; trial < 2000; ++trial) {
    StreamTimes t{u(rng), u(rng), u(rng), u(rng)};
    if (trial % 5 == 0) t.copy = 0;  // GG only: no copies
    const int n = 1 + trial % 24;
    absl::StatusOr<double> sim = SimulateMlpLayer(t, n);
    ASSERT_TRUE(sim.ok());
    ASSERT_NEAR(*sim, ClosedFormLayerTime(t, n), 1e-15) << trial;
  }
}

// StreamClock and PlaceMlpTasks are the simulator's arithmetic without the
// graph: on AppendMlpTasks's tasks they give the same doubles, bit for bit
// (the planner compares plans by these figures and reports the graph's), for
// one layer alone and for layers chained through their dependencies the way
// the planner chains them (a GPU-only task before each layer, the next layer
// waiting for both sides of the previous one).
TEST(StreamClockTest, MatchesTheSimulatorBitForBit) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1e-3);
  std::uniform_int_distribution<int> gemms(1, 40), bits(0, 15);
  for (int trial = 0; trial < 500; ++trial) {
    StepGraph g;
    StreamClock clock;
    std::vector<TaskId> prev;
    double prev_ready = 0;
    const int layers = 1 + trial % 4;
    for (int l = 0; l < layers; ++l) {
      StreamTimes t{u(rng), u(rng), u(rng), u(rng)};
      // Streams without work (a zero time adds no task), in every pattern.
      const int zero = bits(rng);
      if (zero & 1) t.launch = 0;
      if (zero & 2) t.copy = 0;
      if (zero & 4) t.gpu = 0;
      if (zero & 8) t.cpu = 0;
      const int n = gemms(rng);
      const double attn_s = l % 2 == 0 ? u(rng) : 0;
      const TaskId attn = g.Add("attn", Resource::kGpu, attn_s, prev);
      const double attn_end = clock.Place(Resource::kGpu, attn_s, prev_ready);
      const MlpTasks tasks = AppendMlpTasks(&g, "mlp", t, n, {attn}, {attn});
      const MlpEnds ends = PlaceMlpTasks(&clock, t, n, attn_end, attn_end);
      absl::StatusOr<SimResult> sim = Simulate(g);
      ASSERT_TRUE(sim.ok()) << sim.status();
      ASSERT_EQ(tasks.last_gpu >= 0, ends.has_gpu) << trial;
      ASSERT_EQ(tasks.last_cpu >= 0, ends.has_cpu) << trial;
      if (ends.has_gpu) {
        ASSERT_EQ(sim->timings[tasks.last_gpu].end_s, ends.gpu) << trial;
      }
      if (ends.has_cpu) {
        ASSERT_EQ(sim->timings[tasks.last_cpu].end_s, ends.cpu) << trial;
      }
      ASSERT_EQ(sim->makespan_s, clock.makespan()) << trial;
      prev = {ends.has_gpu ? tasks.last_gpu : attn};
      prev_ready = ends.has_gpu ? ends.gpu : attn_end;
      if (ends.has_cpu) {
        prev.push_back(tasks.last_cpu);
        prev_ready = std::max(prev_ready, ends.cpu);
      }
      if (l == 0) {
        StepGraph one;
        AppendMlpTasks(&one, "mlp", t, n, {}, {});
        absl::StatusOr<SimResult> one_sim = Simulate(one);
        ASSERT_TRUE(one_sim.ok());
        absl::StatusOr<double> fast = SimulateMlpLayer(t, n);
        ASSERT_TRUE(fast.ok());
        ASSERT_EQ(*fast, one_sim->makespan_s) << trial;
      }
    }
    EXPECT_TRUE(clock.ok());
  }
}

// A duration the simulator rejects is still rejected, with its error.
TEST(StreamClockTest, BadDurationsAreTheSimulatorsErrors) {
  const StreamTimes t{1e-5, std::numeric_limits<double>::infinity(), 1e-5,
                      1e-5};
  absl::StatusOr<double> r = SimulateMlpLayer(t, 3);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  StreamClock clock;
  PlaceMlpTasks(&clock, t, 3, 0, 0);
  EXPECT_FALSE(clock.ok());
  StreamClock one;
  one.Place(Resource::kCpu, -1, 0);
  EXPECT_FALSE(one.ok());
}

TEST(RegimeNameTest, Names) {
  EXPECT_EQ(RegimeName(Regime::kCopyBound), "copy-bound");
  EXPECT_EQ(RegimeName(Regime::kGpuBound), "GPU-bound");
  EXPECT_EQ(RegimeName(Regime::kLaunchBound), "launch-bound");
}

}  // namespace
}  // namespace tandem::planner::scheinfer
