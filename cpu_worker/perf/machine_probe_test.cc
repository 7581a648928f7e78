#include "cpu_worker/perf/machine_probe.h"

#include "cpu_worker/ops/quant_packed.h"
#include "cpu_worker/ops/stream_prefetch.h"
#include "cpu_worker/perf/machine_info.h"
#include "cpu_worker/perf/timing.h"
#include "gtest/gtest.h"

namespace tandem::perf {
namespace {

TEST(TimingTest, SummaryOfOddAndEvenCounts) {
  Summary s = Summarize({3, 1, 2});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.median, 2);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 3);
  s = Summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_EQ(Summarize({}).n, 0);
}

TEST(TimingTest, RepeatsAndRates) {
  int calls = 0;
  std::vector<double> t = TimeRepeats(2, 3, [&] { ++calls; });
  EXPECT_EQ(calls, 5);
  ASSERT_EQ(t.size(), 3u);
  for (double r : Rates(1.0, t)) EXPECT_GT(r, 0);
}

TEST(MachineProbeTest, BandwidthIsPositive) {
  auto bw = ReadBandwidthGbs(4 << 20, 1, 2);
  ASSERT_TRUE(bw.ok()) << bw.status();
  ASSERT_EQ(bw->size(), 2u);
  for (double g : *bw) EXPECT_GT(g, 0);
  auto cp = CopyBandwidthGbs(1 << 20, 0, 1);
  ASSERT_TRUE(cp.ok());
  EXPECT_GT(cp->at(0), 0);
  EXPECT_FALSE(ReadBandwidthGbs(8, 0, 1).ok());
}

TEST(MachineProbeTest, GemmEveryKind) {
  for (GemmKind kind : {GemmKind::kF32, GemmKind::kBF16}) {
    auto g = MeasureGemm(kind, 64, 128, 128, 1, 2);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_FALSE(g->path.empty());
    ASSERT_EQ(g->gflops.size(), 2u);
    EXPECT_GT(g->gflops[0], 0);
  }
  for (GemmKind kind : {GemmKind::kInt8, GemmKind::kInt8Q4}) {
    auto q = MeasureGemm(kind, Int8KernelMaxRows(), 128, 128, 1, 1);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_NE(q->path.find("int8"), std::string::npos);
    EXPECT_NE(q->path.find(kind == GemmKind::kInt8 ? "Q8_0" : "Q4_0"), std::string::npos)
        << q->path;
    const int64_t past = Int8KernelMaxRows() + 1;
    if (ops::internal::QuantPacksHere()) {
      // Packed at load, the int8 kernel takes prefill too: a batch past its
      // decode rows is still an int8 figure.
      EXPECT_TRUE(Int8KernelTakesRows(past));
      auto big = MeasureGemm(kind, past, 128, 128, 0, 1);
      ASSERT_TRUE(big.ok()) << big.status();
      EXPECT_EQ(big->m, past);
      EXPECT_NE(big->path.find("packed (int8"), std::string::npos) << big->path;
    } else {
      // Past the int8 kernel's rows Linear dequantizes: not an int8 figure.
      EXPECT_FALSE(Int8KernelTakesRows(past));
      EXPECT_FALSE(MeasureGemm(kind, past, 128, 128, 0, 1).ok());
    }
    EXPECT_FALSE(Int8KernelTakesRows(0));
  }
  EXPECT_FALSE(MeasureGemm(GemmKind::kF32, 0, 8, 8, 0, 1).ok());
}

TEST(MachineProbeTest, OverheadAndDescription) {
  auto us = LinearCallOverheadUs(0, 1);
  ASSERT_TRUE(us.ok());
  EXPECT_GT(us->at(0), 0);
  const MachineInfo m = DescribeMachine();
  EXPECT_GT(m.logical_cpus, 0);
  EXPECT_GT(m.omp_threads, 0);
  EXPECT_GT(m.memory_bytes, 0);
  EXPECT_FALSE(m.kernel_isa.empty());
  EXPECT_TRUE(m.stream_prefetch == "l1" || m.stream_prefetch == "l2") << m.stream_prefetch;
  EXPECT_EQ(m.packed_prefetch, ops::PrefetchLevelName(ops::PackedPrefetchLevel()));
}

}  // namespace
}  // namespace tandem::perf
