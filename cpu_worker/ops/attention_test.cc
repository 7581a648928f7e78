#include "cpu_worker/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

struct Case {
  int64_t kv_heads, group, head_dim, block_size, first_pos, n;
  float q_scale;  // large values stress the max subtraction
};

std::string CaseName(const Case& c) {
  return absl::StrCat("kv_heads ", c.kv_heads, " group ", c.group, " head_dim ", c.head_dim,
                      " block ", c.block_size, " first_pos ", c.first_pos, " n ", c.n, " q_scale ",
                      c.q_scale);
}

// A paged cache whose blocks are filled with NaN: reading a slot that was
// never written poisons the output.
struct PagedCache {
  std::vector<float> k, v;
  std::vector<int32_t> table;
  PagedKvLayer layer;
};

PagedCache MakeCache(const Case& c, int64_t total, std::mt19937& rng) {
  PagedCache pc;
  const int64_t used_blocks = (total + c.block_size - 1) / c.block_size;
  const int64_t pool = used_blocks * 2 + 3;
  const int64_t block_elems = c.block_size * c.kv_heads * c.head_dim;
  pc.k.assign(static_cast<size_t>(pool * block_elems), std::numeric_limits<float>::quiet_NaN());
  pc.v = pc.k;
  // Non-contiguous, shuffled block ids drawn from the pool.
  std::vector<int32_t> ids(static_cast<size_t>(pool));
  for (int64_t i = 0; i < pool; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  pc.table.assign(ids.begin(), ids.begin() + used_blocks);
  pc.layer.k = pc.k.data();
  pc.layer.v = pc.v.data();
  pc.layer.block_size = c.block_size;
  pc.layer.kv_heads = c.kv_heads;
  pc.layer.head_dim = c.head_dim;
  return pc;
}

TEST(AttentionTest, PagedMatchesReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const Case cases[] = {
      {1, 1, 64, 16, 0, 1, 1.0f},    {2, 1, 64, 16, 0, 17, 1.0f},    {2, 3, 24, 5, 37, 3, 1.0f},
      {1, 4, 128, 16, 100, 1, 1.0f}, {2, 4, 128, 16, 100, 64, 1.0f}, {3, 3, 80, 1, 9, 17, 1.0f},
      {2, 4, 64, 16, 250, 1, 30.0f}, {1, 3, 7, 4, 13, 64, 1.0f},     {4, 1, 128, 32, 511, 1, 1.0f},
      {2, 4, 64, 16, 31, 33, 8.0f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(CaseName(c));
    const int64_t heads = c.kv_heads * c.group;
    const int64_t total = c.first_pos + c.n;
    const int64_t row = c.kv_heads * c.head_dim;
    std::vector<float> k(static_cast<size_t>(total * row)), v(k.size());
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    std::vector<float> q(static_cast<size_t>(c.n * heads * c.head_dim));
    for (auto& x : q) x = dist(rng) * c.q_scale;

    PagedCache pc = MakeCache(c, total, rng);
    // The earlier part of the sequence arrives in random pieces (prefill
    // chunks, decode steps), then the chunk being attended.
    std::uniform_int_distribution<int64_t> piece(1, 20);
    for (int64_t pos = 0; pos < c.first_pos;) {
      const int64_t len = std::min(piece(rng), c.first_pos - pos);
      WriteKv(pc.layer, pc.table.data(), pos, len, k.data() + pos * row, v.data() + pos * row);
      pos += len;
    }
    WriteKv(pc.layer, pc.table.data(), c.first_pos, c.n, k.data() + c.first_pos * row,
            v.data() + c.first_pos * row);

    // Every position reads back from slot pos % block_size of block
    // table[pos / block_size], bit for bit.
    for (int64_t pos = 0; pos < total; ++pos) {
      const int64_t slot =
          pc.table[static_cast<size_t>(pos / c.block_size)] * c.block_size + pos % c.block_size;
      for (int64_t i = 0; i < row; ++i) {
        ASSERT_EQ(pc.k[static_cast<size_t>(slot * row + i)], k[static_cast<size_t>(pos * row + i)]);
        ASSERT_EQ(pc.v[static_cast<size_t>(slot * row + i)], v[static_cast<size_t>(pos * row + i)]);
      }
    }

    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN()), ref(q.size());
    AttendSequence(q.data(), c.n, heads, pc.layer, pc.table.data(), c.first_pos, scale, out.data());
    ReferenceAttention(q.data(), c.n, heads, k.data(), v.data(), c.kv_heads, c.head_dim,
                       c.first_pos, scale, ref.data());
    // The output is a convex combination of value rows (|v| < ~6): compare
    // with an absolute tolerance at that scale.
    int failures = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!(std::fabs(out[i] - ref[i]) <= 2e-5f) && failures++ < 5) {
        ADD_FAILURE() << "out[" << i << "] = " << out[i] << ", reference " << ref[i];
      }
    }
  }
}

// Hand-checked: two keys, the query matches the second; causal masking makes
// the first query see only key 0.
TEST(AttentionTest, HandCheckedCausalCase) {
  const int64_t hd = 2;
  std::vector<float> k = {1, 0, 0, 1};  // [2 tokens, 1 kv head, 2]
  std::vector<float> v = {10, 20, 30, 40};
  std::vector<float> pool_k(4 * hd, 0.0f), pool_v(4 * hd, 0.0f);
  PagedKvLayer layer{pool_k.data(), pool_v.data(), 2, 1, hd};
  const int32_t table[] = {1};
  WriteKv(layer, table, 0, 2, k.data(), v.data());
  EXPECT_EQ(pool_k[4], 1.0f);           // block 1, slot 0
  EXPECT_EQ(pool_k[7], 1.0f);           // block 1, slot 1
  std::vector<float> q = {0, 1, 0, 1};  // two query tokens, one head
  std::vector<float> out(4);
  AttendSequence(q.data(), 2, 1, layer, table, 0, std::log(3.0f), out.data());
  // Token 0 sees only key 0.
  EXPECT_FLOAT_EQ(out[0], 10.0f);
  EXPECT_FLOAT_EQ(out[1], 20.0f);
  // Token 1: scores (0, log 3) -> weights (1/4, 3/4).
  EXPECT_NEAR(out[2], 0.25f * 10 + 0.75f * 30, 1e-5f);
  EXPECT_NEAR(out[3], 0.25f * 20 + 0.75f * 40, 1e-5f);
}

}  // namespace
}  // namespace tandem::ops
