#include "coordinator/planner/scheinfer/cost_model.h"

#include "gtest/gtest.h"

namespace tandem::planner::scheinfer {
namespace {

constexpr double kTol = 1e-15;

// α_G = 1e-6, β_G = 1e-12; α_C = 2e-6, β_C = 5e-12; α_C2G = 3e-6,
// β_C2G = 4e-11 s/B; t_Launch = 1e-5.
CostModel HandModel() {
  CostModel m;
  m.gpu = {1e-6, 1e-12};
  m.cpu = {2e-6, 5e-12};
  m.h2d = {3e-6, 4e-11};
  m.launch_s = 1e-5;
  return m;
}

// 1e6 elements of 0.5 B (4-bit), 2 rows: n_GEMM = 2e6, n_W = 5e5 B.
GemmShape HandShape(double tokens = 2) {
  GemmShape s;
  s.num_gemms = 3;
  s.elements = 1e6;
  s.weight_bytes = 5e5;
  s.tokens = tokens;
  return s;
}

// Eq. 4 at gg = cg = 0.25, cc = 0.5:
//   t_G   = 2·1e-6 + 0.5·2e6·1e-12 = 3e-6
//   t_C   = 2e-6 + 0.5·2e6·5e-12   = 7e-6
//   t_C2G = 3e-6 + 0.25·5e5·4e-11  = 8e-6
//   t_L   = (2 + 1)·1e-5            = 3e-5
TEST(DecodeStreamTimesTest, Eq4ByHand) {
  const StreamTimes t =
      DecodeStreamTimes(HandModel(), HandShape(), {0.25, 0.25, 0.5});
  EXPECT_NEAR(t.gpu, 3e-6, kTol);
  EXPECT_NEAR(t.cpu, 7e-6, kTol);
  EXPECT_NEAR(t.copy, 8e-6, kTol);
  EXPECT_NEAR(t.launch, 3e-5, kTol);
}

// The sgn terms: an absent share costs nothing, not even its α.
TEST(DecodeStreamTimesTest, AbsentSharesCostNothing) {
  const StreamTimes cc = DecodeStreamTimes(HandModel(), HandShape(), {0, 0, 1});
  EXPECT_EQ(cc.gpu, 0);
  EXPECT_EQ(cc.copy, 0);
  EXPECT_EQ(cc.launch, 0);
  EXPECT_NEAR(cc.cpu, 2e-6 + 2e6 * 5e-12, kTol);  // 1.2e-5

  const StreamTimes gg = DecodeStreamTimes(HandModel(), HandShape(), {1, 0, 0});
  EXPECT_EQ(gg.cpu, 0);
  EXPECT_EQ(gg.copy, 0);
  EXPECT_NEAR(gg.launch, 1e-5, kTol);             // one GEMM launch
  EXPECT_NEAR(gg.gpu, 1e-6 + 2e6 * 1e-12, kTol);  // 3e-6

  // cc computed as 1 − 0.3 − 0.7 in floating point is not exactly 0; the
  // residue must not buy a CPU call.
  const double cc_residue = 1.0 - 0.3 - 0.7;
  const StreamTimes r =
      DecodeStreamTimes(HandModel(), HandShape(), {0.3, 0.7, cc_residue});
  EXPECT_EQ(r.cpu, 0);
}

// With n_g = 0, prefill is the decode schedule at the prefill rows (our
// reading of Eq. 15's sgn(r_CC) terms: no CG′ copy without CG′ tokens).
TEST(PrefillStreamTimesTest, NoGpuTokensIsTheDecodeSchedule) {
  const Split split{0.25, 0.25, 0.5};
  const StreamTimes p =
      PrefillStreamTimes(HandModel(), HandShape(100), split, 0);
  const StreamTimes d = DecodeStreamTimes(HandModel(), HandShape(100), split);
  EXPECT_DOUBLE_EQ(p.launch, d.launch);
  EXPECT_DOUBLE_EQ(p.copy, d.copy);
  EXPECT_DOUBLE_EQ(p.gpu, d.gpu);
  EXPECT_DOUBLE_EQ(p.cpu, d.cpu);
}

// Eq. 15 at T = 100, n_g = 50 (φ = 0.5), gg = cg = 0.25, cc = 0.5:
//   t′_L   = (2 + 2 + 1)·1e-5                                = 5e-5
//   t′_C2G = 2·3e-6 + (0.25 + 0.5)·5e5·4e-11                 = 2.1e-5
//   t′_G   = 3·1e-6 + (100·0.5 + 50·0.5)·1e6·1e-12           = 7.8e-5
//   t′_C   = 2e-6 + 50·0.5·1e6·5e-12                         = 1.27e-4
TEST(PrefillStreamTimesTest, Eq15ByHand) {
  const StreamTimes t =
      PrefillStreamTimes(HandModel(), HandShape(100), {0.25, 0.25, 0.5}, 0.5);
  EXPECT_NEAR(t.launch, 5e-5, kTol);
  EXPECT_NEAR(t.copy, 2.1e-5, kTol);
  EXPECT_NEAR(t.gpu, 7.8e-5, kTol);
  EXPECT_NEAR(t.cpu, 1.27e-4, kTol);
  // All tokens on the GPU: the CPU has nothing left, not even its α.
  EXPECT_EQ(
      PrefillStreamTimes(HandModel(), HandShape(100), {0.25, 0.25, 0.5}, 1).cpu,
      0);
}

HardwareProfile HandProfile() {
  HardwareProfile p;
  p.name = "hand";
  p.gpu.count = 1;
  p.gpu.memory_bytes = 24'000'000'000;
  p.gpu.memory_bandwidth = 1e12;
  p.gpu.bf16_flops = 1e14;
  p.gpu.launch_overhead_s = 5e-6;
  p.cpu.threads = 16;
  p.cpu.memory_bytes = 256'000'000'000;
  p.cpu.memory_bandwidth = 1.6e11;
  p.cpu.memory_bandwidth_per_thread = 5e9;
  p.cpu.bf16_flops = 2e12;
  p.cpu.f32_flops = 2e12;
  p.cpu.op_overhead_s = 1e-6;
  p.link.h2d_bandwidth = 2.5e10;
  p.link.d2h_bandwidth = 2.5e10;
  p.link.h2d_latency_s = 3e-6;
  return p;
}

// β = max(bpe / (T·bandwidth), 2 / peak), bpe = 0.5:
//   T = 1:    β_G = max(0.5/1e12 = 5e-13, 2e-14) = 5e-13 (bandwidth-bound)
//             β_C = max(0.5/1.6e11 = 3.125e-12, 1e-12) = 3.125e-12
//   T = 1000: β_G = max(5e-16, 2e-14) = 2e-14 (compute-bound)
//             β_C = max(3.125e-15, 1e-12) = 1e-12
TEST(CostModelFromProfileTest, RooflineLines) {
  absl::StatusOr<CostModel> d = CostModelFromProfile(HandProfile(), 0.5, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->gpu.alpha, 0);
  EXPECT_NEAR(d->gpu.beta, 5e-13, 1e-27);
  EXPECT_NEAR(d->cpu.alpha, 1e-6, kTol);
  EXPECT_NEAR(d->cpu.beta, 3.125e-12, 1e-27);
  EXPECT_NEAR(d->h2d.alpha, 3e-6, kTol);
  EXPECT_NEAR(d->h2d.beta, 4e-11, 1e-25);
  EXPECT_NEAR(d->launch_s, 5e-6, kTol);

  absl::StatusOr<CostModel> p = CostModelFromProfile(HandProfile(), 0.5, 1000);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->gpu.beta, 2e-14, 1e-28);
  EXPECT_NEAR(p->cpu.beta, 1e-12, 1e-26);
}

// 8 threads of 5 GB/s each: min(160, 40) = 40 GB/s, β_C = 0.5/4e10 = 1.25e-11.
TEST(CostModelFromProfileTest, FewerThreadsSlowTheCpuLine) {
  absl::StatusOr<HardwareProfile> eight = HandProfile().WithCpuThreads(8);
  ASSERT_TRUE(eight.ok()) << eight.status();
  absl::StatusOr<CostModel> m = CostModelFromProfile(*eight, 0.5, 1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR(m->cpu.beta, 1.25e-11, 1e-25);
}

TEST(CostModelFromProfileTest, Errors) {
  HardwareProfile no_gpu = HandProfile();
  no_gpu.gpu.count = 0;
  EXPECT_EQ(CostModelFromProfile(no_gpu, 0.5, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CostModelFromProfile(HandProfile(), 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CostModelFromProfile(HandProfile(), 0.5, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  HardwareProfile no_link = HandProfile();
  no_link.link.h2d_bandwidth = 0;
  absl::Status s = CostModelFromProfile(no_link, 0.5, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("h2d_bandwidth"), std::string::npos) << s;
}

}  // namespace
}  // namespace tandem::planner::scheinfer
