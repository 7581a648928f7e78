// CPU attention over the CPU KV cache against the plain reference attention
// on random inputs: several sequences of one layer interleaved in one call,
// prefill chunks and decode steps arriving over several calls and layers,
// GQA, blocks shorter than chunks. Then the state rules: positions must be
// contiguous per layer, capacity is all or nothing, freed ids can be reused.
#include "cpu_worker/kv/cpu_attention.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cpu_worker/ops/attention.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

CpuAttentionShape Shape(int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim,
                        int64_t block, int64_t capacity) {
  CpuAttentionShape s;
  s.kv.num_layers = layers;
  s.kv.kv_heads = kv_heads;
  s.kv.head_dim = head_dim;
  s.kv.block_size = block;
  s.kv.capacity_tokens = capacity;
  s.heads = heads;
  s.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return s;
}

// One sequence's whole history for one layer, contiguous.
struct History {
  std::vector<float> k, v;  // [len, kv_dim]
};

TEST(CpuAttention, MatchesReferenceOverChunksLayersAndSequences) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t layers = 3, heads = 8, kv_heads = 2, hd = 16, block = 4;
  const int64_t qd = heads * hd, kvd = kv_heads * hd;
  auto attn = CpuAttention::Create(Shape(layers, heads, kv_heads, hd, block, 512));
  ASSERT_TRUE(attn.ok()) << attn.status();

  // Chunk sizes per step for three sequences (0 = not in that step):
  // prefill chunks of different lengths, then decodes.
  const std::vector<std::vector<int64_t>> steps = {
      {7, 0, 3}, {5, 11, 1}, {1, 6, 1}, {1, 1, 9}, {1, 1, 1}, {1, 17, 1}};
  const int64_t seq_ids[] = {40, 7, 1000};
  std::vector<std::vector<History>> hist(3, std::vector<History>(static_cast<size_t>(layers)));
  std::vector<int64_t> len(3, 0);
  for (const auto& step : steps) {
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<CpuAttentionTask> tasks;
      std::vector<std::vector<float>> q(3), k(3), v(3), out(3);
      for (int s = 0; s < 3; ++s) {
        const int64_t n = step[static_cast<size_t>(s)];
        if (n == 0) continue;
        q[s].resize(static_cast<size_t>(n * qd));
        k[s].resize(static_cast<size_t>(n * kvd));
        v[s].resize(static_cast<size_t>(n * kvd));
        for (auto& x : q[s]) x = dist(rng);
        for (auto& x : k[s]) x = dist(rng);
        for (auto& x : v[s]) x = dist(rng);
        out[s].assign(q[s].size(), std::numeric_limits<float>::quiet_NaN());
        tasks.push_back({seq_ids[s], len[s], n, q[s].data(), k[s].data(), v[s].data(),
                         out[s].data()});
        History& h = hist[s][static_cast<size_t>(l)];
        h.k.insert(h.k.end(), k[s].begin(), k[s].end());
        h.v.insert(h.v.end(), v[s].begin(), v[s].end());
      }
      ASSERT_TRUE((*attn)->Run(l, tasks).ok());
      for (int s = 0; s < 3; ++s) {
        const int64_t n = step[static_cast<size_t>(s)];
        if (n == 0) continue;
        const History& h = hist[s][static_cast<size_t>(l)];
        std::vector<float> ref(q[s].size());
        ops::ReferenceAttention(q[s].data(), n, heads, h.k.data(), h.v.data(), kv_heads, hd,
                                len[s], (*attn)->shape().scale, ref.data());
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_NEAR(out[s][i], ref[i], 2e-5f) << "seq " << s << " layer " << l << " i " << i;
        }
      }
    }
    for (int s = 0; s < 3; ++s) len[s] += step[static_cast<size_t>(s)];
  }
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ((*attn)->cache().Written(seq_ids[s], layers - 1), len[s]);
  }
}

// Random q/k/v of n tokens for the one-kv-head shape below.
struct Rows {
  std::vector<float> q, k, v, out;
  CpuAttentionTask Task(int64_t seq, int64_t start) {
    const int64_t n = static_cast<int64_t>(k.size()) / 4;
    return {seq, start, n, q.data(), k.data(), v.data(), out.data()};
  }
};
Rows MakeRows(int64_t n, float value) {
  Rows r;
  r.q.assign(static_cast<size_t>(n * 8), value);
  r.k.assign(static_cast<size_t>(n * 4), value);
  r.v.assign(static_cast<size_t>(n * 4), value);
  r.out.assign(static_cast<size_t>(n * 8), 0.0f);
  return r;
}

TEST(CpuAttention, RejectsGapsAndBadTasksWithoutState) {
  auto attn = CpuAttention::Create(Shape(2, 2, 1, 4, 4, 64));
  ASSERT_TRUE(attn.ok());
  Rows r = MakeRows(3, 1.0f);
  // A new sequence must start at 0.
  EXPECT_EQ((*attn)->Run(0, std::vector{r.Task(1, 2)}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*attn)->cache().Has(1));
  EXPECT_EQ((*attn)->Run(2, std::vector{r.Task(1, 0)}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*attn)->Run(-1, std::vector{r.Task(1, 0)}).code(), absl::StatusCode::kInvalidArgument);
  CpuAttentionTask empty = r.Task(1, 0);
  empty.tokens = 0;
  EXPECT_EQ((*attn)->Run(0, std::vector{empty}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*attn)->Run(0, std::vector{r.Task(1, 0)}).ok());
  // Layer 1 has not seen positions 0..2 yet: starting at 3 there is a gap.
  EXPECT_EQ((*attn)->Run(1, std::vector{r.Task(1, 3)}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*attn)->Run(1, std::vector{r.Task(1, 0)}).ok());
  // Rewriting from an earlier position (a retried step) is allowed.
  ASSERT_TRUE((*attn)->Run(0, std::vector{r.Task(1, 1)}).ok());
  EXPECT_EQ((*attn)->cache().Written(1, 0), 4);
  // The same sequence twice in one call: the second continues the first.
  Rows a = MakeRows(2, 1.0f), b = MakeRows(1, 1.0f);
  ASSERT_TRUE((*attn)->Run(1, std::vector{a.Task(1, 3), b.Task(1, 5)}).ok());
  EXPECT_EQ((*attn)->cache().Written(1, 1), 6);
}

TEST(CpuAttention, CapacityIsAllOrNothingAndFreedBlocksAreReused) {
  // 16 tokens = 4 blocks of 4.
  auto attn = CpuAttention::Create(Shape(1, 2, 1, 4, 4, 16));
  ASSERT_TRUE(attn.ok());
  const CpuKvCache& cache = (*attn)->cache();
  Rows a = MakeRows(9, 1.0f), b = MakeRows(8, 2.0f);
  // 3 + 2 blocks do not fit in 4: nothing is taken.
  EXPECT_EQ((*attn)->Run(0, std::vector{a.Task(1, 0), b.Task(2, 0)}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.free_blocks(), 4);
  EXPECT_EQ(cache.num_sequences(), 0);
  ASSERT_TRUE((*attn)->Run(0, std::vector{a.Task(1, 0)}).ok());
  EXPECT_EQ(cache.free_blocks(), 1);
  EXPECT_EQ((*attn)->Run(0, std::vector{b.Task(2, 0)}).code(),
            absl::StatusCode::kResourceExhausted);
  (*attn)->Free(1);
  (*attn)->Free(12345);  // unknown: ignored
  EXPECT_EQ(cache.free_blocks(), 4);
  // Id 1 reused for a new sequence starts from nothing.
  ASSERT_TRUE((*attn)->Run(0, std::vector{b.Task(1, 0)}).ok());
  EXPECT_EQ(cache.Written(1, 0), 8);
  // Attention of identical keys/values returns the value.
  for (float x : b.out) EXPECT_FLOAT_EQ(x, 2.0f);
}

TEST(CpuAttention, BadShapesAreErrors) {
  EXPECT_EQ(CpuAttention::Create(Shape(1, 3, 2, 4, 4, 16)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuAttention::Create(Shape(0, 2, 1, 4, 4, 16)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuAttention::Create(Shape(1, 2, 1, 4, 4, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuAttention::Create(Shape(1 << 20, 2, 1, 1 << 20, 4, 1 << 30)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tandem
