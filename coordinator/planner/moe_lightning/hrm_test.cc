#include "coordinator/planner/moe_lightning/hrm.h"

#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/moe_lightning/ml_test_util.h"
#include "gtest/gtest.h"

namespace tandem::planner::ml {
namespace {

// A hand-made two-level machine with round figures:
//   GPU (level i): 100 TFLOP/s, 1 TB/s   -> ridge at 100 FLOP/B
//   CPU (level j): 1 TFLOP/s, 100 GB/s   -> ridge at 10 FLOP/B
//   PCIe (j -> i): 10 GB/s
HierarchicalRoofline Machine() {
  HierarchicalRoofline h;
  h.compute = {100e12, 1e12};
  h.home = {1e12, 100e9};
  h.link_bandwidth = 10e9;
  return h;
}

TEST(HrmTest, ClassicRooflineOnOneLevel) {
  const HierarchicalRoofline h = Machine();
  // Eq. 1-2: below the ridge B·I, above it P_peak.
  EXPECT_DOUBLE_EQ(AttainableOnLevel(h.compute, 50), 50e12);    // 1 TB/s x 50
  EXPECT_DOUBLE_EQ(AttainableOnLevel(h.compute, 200), 100e12);  // capped
  EXPECT_DOUBLE_EQ(AttainableOnLevel(h.home, 4), 400e9);        // 100 GB/s x 4
  EXPECT_DOUBLE_EQ(AttainableOnLevel(h.home, 0), 0);
}

TEST(HrmTest, FetchedDataAddsTheLinkRoof) {
  const HierarchicalRoofline h = Machine();
  // Eq. 7 = min(P^i, B^i·I^i, B^{j,i}·I^j).
  // I^i 50, I^j 1000: min(100T, 50T, 10 GB/s x 1000 = 10T) = 10T, link-bound.
  EXPECT_DOUBLE_EQ(AttainableFetched(h, 50, 1000), 10e12);
  EXPECT_EQ(BindingRoof(h, 50, 1000), Roof::kLink);
  // I^j 10000: link 100T, so HBM binds at 50T.
  EXPECT_DOUBLE_EQ(AttainableFetched(h, 50, 10000), 50e12);
  EXPECT_EQ(BindingRoof(h, 50, 10000), Roof::kLevelMemory);
  // I^i 200, I^j 20000: min(100T, 200T, 200T) = 100T, compute-bound.
  EXPECT_DOUBLE_EQ(AttainableFetched(h, 200, 20000), 100e12);
  EXPECT_EQ(BindingRoof(h, 200, 20000), Roof::kCompute);
  // Nothing fetched (I^j = 0 means no bytes cross): Eq. 8.
  EXPECT_DOUBLE_EQ(AttainableFetched(h, 50, 0), 50e12);
  EXPECT_EQ(BindingRoof(h, 50, 0), Roof::kLevelMemory);
}

TEST(HrmTest, TurningPointP1DecidesWhereToCompute) {
  const HierarchicalRoofline h = Machine();
  // Eq. 9: P1(I^j) = min(P^j, B^j·I^j) / B^{j,i}.
  // Memory-bound on the CPU (I^j = 4 < 10): P1 = 400 GB/s-equivalent / 10
  // GB/s = 40 > 4, so fetching never pays: the link gives 40 GFLOP/s where
  // the CPU gives 400.
  EXPECT_DOUBLE_EQ(TurningPointP1(h, 4), 40);
  EXPECT_FALSE(FetchBeatsHome(h, 4, 4));
  // Compute-bound on the CPU: P1 = 1 TFLOP/s / 10 GB/s = 100, constant.
  EXPECT_DOUBLE_EQ(TurningPointP1(h, 50), 100);
  EXPECT_DOUBLE_EQ(TurningPointP1(h, 500), 100);
  // I^j = 50 < 100: link 500 GFLOP/s < CPU 1 TFLOP/s, stay on the CPU.
  EXPECT_FALSE(FetchBeatsHome(h, 200, 50));
  // I^j = 200 > 100: link 2 TFLOP/s > CPU 1 TFLOP/s, ship to the GPU.
  EXPECT_TRUE(FetchBeatsHome(h, 200, 200));
  // ... unless the GPU's own roof is lower (I^i = 0.5: 0.5 TFLOP/s).
  EXPECT_FALSE(FetchBeatsHome(h, 0.5, 200));
}

TEST(HrmTest, TurningPointP2AndTheBalancePoint) {
  const HierarchicalRoofline h = Machine();
  // Eq. 10: P2 = min(P^i, B^i·I^i) / B^{j,i}.
  // GPU memory-bound (I^i = 50): 50 TFLOP/s / 10 GB/s = 5000.
  EXPECT_DOUBLE_EQ(TurningPointP2(h, 50), 5000);
  // GPU compute-bound (I^i = 200): 100 TFLOP/s / 10 GB/s = 10000.
  EXPECT_DOUBLE_EQ(TurningPointP2(h, 200), 10000);
  // Eq. 11: B^i·I^i = B^{j,i}·I^j at I^j = 1 TB/s x I^i / 10 GB/s. It equals
  // P2 while the GPU is memory-bound, and passes it once compute binds
  // (there, more I^i no longer helps either).
  EXPECT_DOUBLE_EQ(BalanceIntensityHome(h, 50), 5000);
  EXPECT_DOUBLE_EQ(BalanceIntensityHome(h, 200), 20000);
  // At the balance point the link and HBM roofs meet.
  EXPECT_DOUBLE_EQ(AttainableFetched(h, 50, 5000), 50e12);
  EXPECT_DOUBLE_EQ(h.link_bandwidth * 5000, h.compute.bandwidth * 50);
}

TEST(HrmTest, DegenerateFiguresGiveZeroNotNan) {
  HierarchicalRoofline h = Machine();
  h.link_bandwidth = 0;
  EXPECT_EQ(TurningPointP1(h, 4), 0);
  EXPECT_EQ(TurningPointP2(h, 4), 0);
  EXPECT_EQ(BalanceIntensityHome(h, 4), 0);
  EXPECT_EQ(BalanceMicroBatches(1.0, 0), 0);
}

TEST(HrmTest, BalanceMicroBatches) {
  // 0.24 s of PCIe per layer against 13.2 ms of GPU per micro-batch:
  // 0.24 / 0.0132 = 18.18 micro-batches balance the two.
  EXPECT_NEAR(BalanceMicroBatches(0.24, 0.0132), 18.1818, 1e-4);
}

TEST(HrmTest, MixtralIntensitiesMatchTheDigest) {
  // Digest §2.4: I_attn = 2 (n_q / n_kv) / dt = 2 x 4 / 2 = 4 FLOP/B for
  // Mixtral's fp16 KV, whatever the batch; I_ffn against CPU-resident
  // weights = 2kN / (n_e · dt · (1 − r_w)) = N / 4 at r_w = 0.
  absl::StatusOr<ModelCost> m = ModelCost::Create(testing::Mixtral8x7B());
  ASSERT_TRUE(m.ok()) << m.status();
  for (int64_t batch : {1, 64}) {
    for (const OpCost& op : m->DecodeLayer(0, batch, 512)) {
      if (op.kind != OpKind::kAttentionCore) continue;
      // Attention reads K and V (4096 B a key) and writes a little more
      // (the new token, q in and out), so slightly under 4.
      EXPECT_NEAR(op.flops / op.kv_read_bytes, 4.0, 1e-9);
      EXPECT_NEAR(op.intensity(), 4.0, 0.1);
    }
  }
  const int64_t n = 1024;
  double flops = 0;
  for (const OpCost& op : m->DecodeLayer(0, n, 512)) {
    if (op.kind == OpKind::kRoutedExperts) flops = op.flops;
  }
  const double host_bytes = 8 * m->expert_bytes();
  EXPECT_NEAR(flops / host_bytes, n / 4.0, 1e-9);
  // On the T4 testbed the attention's 4 FLOP/B is far below P1 (CPU
  // attention at 42 GB/s, PCIe at 12 GB/s: P1 = 42 x 4 / 12 = 14), so it
  // belongs on the CPU: the paper's case study.
  HierarchicalRoofline t4;
  t4.compute = {24e12, 220e9};
  t4.home = {0.65e12, 42e9};
  t4.link_bandwidth = 12e9;
  EXPECT_DOUBLE_EQ(TurningPointP1(t4, 4), 14);
  EXPECT_FALSE(FetchBeatsHome(t4, 4, 4));
}

}  // namespace
}  // namespace tandem::planner::ml
