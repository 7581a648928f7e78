// RunMlps against RunMlp call by call, bit for bit, on each of its three
// ways (whole MLPs shared out over the threads, gates and ups grouped, and
// MLPs too large to share out), for f32, bf16, Q8_0 and Q4_0 weights as the
// host device holds them; and ShareMlpsOut's judgement on made-up costs.
// Random inputs from a fresh seed each run, printed on failure.
#include "cpu_worker/ops/mlp.h"

#include <omp.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/quant.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

struct Weight {
  std::vector<uint8_t> bytes;
  LinearWeight w;
};

// An [n, k] weight of random normal values stored as `t`.
Weight MakeWeight(std::mt19937& rng, DType t, int64_t n, int64_t k) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n * k));
  for (float& v : f) v = dist(rng);
  Weight w;
  w.bytes.resize(static_cast<size_t>(DTypeBytes(t, n * k).value()));
  if (t == DType::kF32) {
    std::memcpy(w.bytes.data(), f.data(), w.bytes.size());
  } else if (t == DType::kBF16) {
    auto* b = reinterpret_cast<uint16_t*>(w.bytes.data());
    for (size_t i = 0; i < f.size(); ++i) b[i] = F32ToBf16(f[i]);
  } else {
    QuantizeFromF32(t, f.data(), n * k, w.bytes.data());
  }
  TensorView v;
  v.name = "w";
  v.dtype = t;
  v.shape = {n, k};
  v.data = w.bytes.data();
  v.nbytes = static_cast<int64_t>(w.bytes.size());
  auto lw = LinearWeight::Create(v, ComputeType::kQuantized,
                                 WeightLayout::kCpuPacked);
  EXPECT_TRUE(lw.ok()) << lw.status();
  if (lw.ok()) w.w = *std::move(lw);
  return w;
}

TEST(MlpTest, SharesOutOnlyWhatLoadsTheThreadsEvenly) {
  using internal::ShareMlpsOut;
  EXPECT_TRUE(ShareMlpsOut({1, 1}, 2));
  EXPECT_TRUE(ShareMlpsOut(std::vector<double>(8, 1.0), 2));
  EXPECT_TRUE(ShareMlpsOut({3, 1, 1, 1}, 2));  // 3 | 1 + 1 + 1
  EXPECT_FALSE(ShareMlpsOut({1, 1, 1}, 2));    // 2 against a mean of 1.5
  EXPECT_FALSE(ShareMlpsOut({2, 1}, 2));
  EXPECT_FALSE(ShareMlpsOut({1}, 2));       // fewer calls than threads
  EXPECT_FALSE(ShareMlpsOut({1, 1}, 1));    // one thread
  EXPECT_TRUE(ShareMlpsOut({1.05, 1}, 2));  // within 10 % of the mean
}

TEST(MlpTest, RunMlpsGivesEachCallTheBitsOfRunMlp) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t hidden = 544, ffn = 224;
  // Rows per call: shared out (four single rows, and eight), grouped (1, 2,
  // 1: they do not share out evenly over two threads), split (past
  // kShareMlpMaxRows), and in groups of up to kGroupMaxRows rows (40 | 30,
  // 8 | 70).
  const std::vector<std::vector<int64_t>> cases = {
      {1, 1, 1, 1}, {2, 1, 3, 1, 1, 2, 1, 1}, {1, 2, 1}, {20, 24}, {40, 30, 8, 70}};
  for (DType t : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(DTypeName(t));
    std::vector<Weight> parts;
    std::vector<MlpWeights> experts(8);
    for (MlpWeights& e : experts) {
      parts.push_back(MakeWeight(rng, t, ffn, hidden));
      e.gate = parts.back().w;
      parts.push_back(MakeWeight(rng, t, ffn, hidden));
      e.up = parts.back().w;
      parts.push_back(MakeWeight(rng, t, hidden, ffn));
      e.down = parts.back().w;
    }
    for (const std::vector<int64_t>& rows : cases) {
      int64_t total = 0;
      for (int64_t r : rows) total += r;
      std::vector<float> x(static_cast<size_t>(total * hidden));
      for (float& v : x) v = dist(rng);
      std::vector<float> want(x.size()), got(x.size(), 7.0f);
      MlpScratch scratch;
      std::vector<MlpCall> calls;
      int64_t at = 0;
      for (size_t c = 0; c < rows.size(); ++c) {
        const MlpWeights& e = experts[c];
        RunMlp(e, x.data() + at * hidden, rows[c], want.data() + at * hidden,
               scratch);
        calls.push_back(
            {&e, x.data() + at * hidden, rows[c], got.data() + at * hidden});
        at += rows[c];
      }
      RunMlps(calls.data(), static_cast<int64_t>(calls.size()), scratch);
      EXPECT_EQ(got, want) << "calls of " << ::testing::PrintToString(rows)
                           << " rows on " << omp_get_max_threads()
                           << " threads";
    }
  }
}

}  // namespace
}  // namespace tandem::ops
