#include "cpu_worker/ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// n values drawn from N(0, scale^2).
std::vector<float> Normal(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
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
    const std::vector<float> k = Normal(rng, total * row), v = Normal(rng, total * row);
    const std::vector<float> q = Normal(rng, c.n * heads * c.head_dim, c.q_scale);

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

    // Every position's key and value of kv head h read back from slot
    // pos % block_size of head h's part of block table[pos / block_size],
    // bit for bit: keys [blocks, kv_heads, head_dim, block_size], values
    // [blocks, kv_heads, block_size, head_dim].
    for (int64_t pos = 0; pos < total; ++pos) {
      const int64_t block = pc.table[static_cast<size_t>(pos / c.block_size)];
      for (int64_t h = 0; h < c.kv_heads; ++h) {
        const int64_t part = (block * c.kv_heads + h) * c.block_size * c.head_dim;
        const int64_t slot = pos % c.block_size;
        ASSERT_EQ(part + slot, KeyOffset(pc.layer, pc.table.data(), pos, h));
        ASSERT_EQ(part + slot * c.head_dim, ValueRowOffset(pc.layer, pc.table.data(), pos, h));
        for (int64_t i = 0; i < c.head_dim; ++i) {
          const size_t from = static_cast<size_t>(pos * row + h * c.head_dim + i);
          ASSERT_EQ(pc.k[static_cast<size_t>(part + i * c.block_size + slot)], k[from]);
          ASSERT_EQ(pc.v[static_cast<size_t>(part + slot * c.head_dim + i)], v[from]);
        }
      }
    }

    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN()), ref(q.size());
    AttendSequence(q.data(), c.n, heads, pc.layer, pc.table.data(), c.first_pos, scale, out.data());
    ReferenceAttention(q.data(), c.n, heads, k.data(), v.data(), c.kv_heads, c.head_dim,
                       c.first_pos, scale, ref.data());
    // The output is a convex combination of value rows (|v| < ~6): compare
    // with an absolute tolerance at that scale. The logits' f32 rounding
    // grows with |q|, and moves the softmax weights with it: queries scaled
    // by 30 (sharp attention) have been seen 2.03e-5 off.
    const float tolerance = 2e-5f * std::max(1.0f, c.q_scale / 8.0f);
    int failures = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!(std::fabs(out[i] - ref[i]) <= tolerance) && failures++ < 5) {
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
  EXPECT_EQ(pool_k[4], 1.0f);           // block 1, dim 0 of slot 0
  EXPECT_EQ(pool_k[7], 1.0f);           // block 1, dim 1 of slot 1
  EXPECT_EQ(pool_v[5], 20.0f);          // block 1, slot 0, dim 1
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

// ---------------------------------------------------------------------------
// Decode (AttendDecode): one query per sequence, against the reference.

struct DecodeShape {
  int64_t kv_heads, group, head_dim, block_size;
};

std::string ShapeName(const DecodeShape& s) {
  return absl::StrCat("kv_heads ", s.kv_heads, " group ", s.group, " head_dim ", s.head_dim,
                      " block ", s.block_size);
}

// Sequences of one decode call, their blocks drawn shuffled from one
// NaN-filled pool (a slot read that was never written poisons the output).
struct DecodeBatch {
  DecodeShape shape;
  std::vector<int64_t> lens;
  std::vector<std::vector<float>> k, v;  // per sequence [len, kv_heads, head_dim]
  std::vector<std::vector<float>> q;     // per sequence [heads, head_dim]
  std::vector<std::vector<int32_t>> tables;
  std::vector<float> pool_k, pool_v;
  PagedKvLayer layer;
};

DecodeBatch MakeDecodeBatch(const DecodeShape& s, const std::vector<int64_t>& lens, float q_scale,
                            std::mt19937& rng) {
  DecodeBatch b;
  b.shape = s;
  b.lens = lens;
  const int64_t heads = s.kv_heads * s.group, row = s.kv_heads * s.head_dim;
  int64_t used = 0;
  for (int64_t len : lens) used += (len + s.block_size - 1) / s.block_size;
  const int64_t pool = used + 5;
  b.pool_k.assign(static_cast<size_t>(pool * s.block_size * row),
                  std::numeric_limits<float>::quiet_NaN());
  b.pool_v = b.pool_k;
  b.layer = {b.pool_k.data(), b.pool_v.data(), s.block_size, s.kv_heads, s.head_dim};
  std::vector<int32_t> ids(static_cast<size_t>(pool));
  for (int64_t i = 0; i < pool; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (int64_t len : lens) {
    const size_t blocks = static_cast<size_t>((len + s.block_size - 1) / s.block_size);
    b.tables.emplace_back(ids.begin() + static_cast<ptrdiff_t>(next),
                          ids.begin() + static_cast<ptrdiff_t>(next + blocks));
    next += blocks;
    std::vector<float> k = Normal(rng, len * row), v = Normal(rng, len * row);
    std::vector<float> q = Normal(rng, heads * s.head_dim, q_scale);
    WriteKv(b.layer, b.tables.back().data(), 0, len, k.data(), v.data());
    b.k.push_back(std::move(k));
    b.v.push_back(std::move(v));
    b.q.push_back(std::move(q));
  }
  return b;
}

// One AttendDecode call over the whole batch, each sequence checked against
// ReferenceAttention. The tolerance is relative to the scale of the sum
// being formed: the softmax-weighted mean of |v| (the reference on |v|),
// which is what f32 rounding errors scale with, unlike the output itself
// (a near-cancelling average when the softmax is flat).
void ExpectDecodeMatches(const DecodeBatch& b, KernelIsa max_isa, float rel_tol = 1e-5f) {
  const DecodeShape& s = b.shape;
  const int64_t heads = s.kv_heads * s.group, qd = heads * s.head_dim;
  const size_t n = b.lens.size();
  std::vector<std::vector<float>> out(n);
  std::vector<DecodeQuery> queries(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].assign(static_cast<size_t>(qd), std::numeric_limits<float>::quiet_NaN());
    queries[i] = {b.q[i].data(), b.tables[i].data(), b.lens[i], out[i].data()};
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  AttendDecode(queries.data(), static_cast<int64_t>(n), heads, b.layer, scale, max_isa);
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(absl::StrCat("sequence ", i, " of ", n, ", len ", b.lens[i]));
    const int64_t first_pos = b.lens[i] - 1;
    std::vector<float> ref(static_cast<size_t>(qd)), mag(ref.size()), abs_v(b.v[i].size());
    for (size_t j = 0; j < abs_v.size(); ++j) abs_v[j] = std::fabs(b.v[i][j]);
    ReferenceAttention(b.q[i].data(), 1, heads, b.k[i].data(), b.v[i].data(), s.kv_heads,
                       s.head_dim, first_pos, scale, ref.data());
    ReferenceAttention(b.q[i].data(), 1, heads, b.k[i].data(), abs_v.data(), s.kv_heads, s.head_dim,
                       first_pos, scale, mag.data());
    int failures = 0;
    for (size_t j = 0; j < ref.size(); ++j) {
      if (!(std::fabs(out[i][j] - ref[j]) <= rel_tol * mag[j] + 1e-30f) && failures++ < 5) {
        ADD_FAILURE() << "out[" << j << "] = " << out[i][j] << ", reference " << ref[j]
                      << " (scale " << mag[j] << ")";
      }
    }
  }
}

// Runs `body` with 1 thread (whole sequences, no merge) and with 4 (long
// contexts cut into chunks and merged), whatever the machine's core count.
template <typename F>
void WithThreads(F body) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 4}) {
    SCOPED_TRACE(absl::StrCat(threads, " OpenMP threads"));
    omp_set_num_threads(threads);
    body();
  }
  omp_set_num_threads(saved);
}

// Parameter: the highest kernel level allowed (kScalar: the portable
// kernel, kAvx2: the AVX2 one, kAvx512: the AVX-512 one). A level the host
// (or TANDEM_CPU_ISA) does not allow skips, saying so: the call would run a
// lower kernel, which its own instance tests.
class DecodeTest : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    if (MaxKernelIsa() < GetParam()) {
      GTEST_SKIP() << "the " << KernelIsaName(GetParam()) << " kernel does not run here (best: "
                   << KernelIsaName(MaxKernelIsa()) << ")";
    }
  }
};

TEST_P(DecodeTest, MatchesReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  WithThreads([&] {
    for (int64_t group : {1, 2, 4, 8}) {
      for (int64_t head_dim : {64, 128}) {
        for (int64_t len : {1, 15, 16, 17, 1000, 4096}) {
          for (float q_scale : {1.0f, 8.0f}) {
            const DecodeShape shape{2, group, head_dim, 16};
            SCOPED_TRACE(absl::StrCat(ShapeName(shape), " len ", len, " q_scale ", q_scale));
            ExpectDecodeMatches(MakeDecodeBatch(shape, {len}, q_scale, rng), GetParam());
          }
        }
      }
    }
  });
}

// Shapes off the fast path: head_dim not a multiple of 16 (masked tails;
// for AVX2, a last vector of 8) or of 8 (AVX2: the portable kernel),
// groups above the AVX-512 kernel's 8 heads and the AVX2 kernel's 4
// (sliced), blocks of one token, of an odd size (AVX2: runs of 16 or 8
// beside portable ones), of 8 and larger than a tile.
TEST_P(DecodeTest, OddShapes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const DecodeShape shapes[] = {{1, 3, 24, 5},   {3, 12, 40, 16}, {2, 16, 64, 16},
                                {1, 1, 7, 1},    {2, 5, 80, 48},  {1, 9, 128, 64},
                                {4, 1, 16, 33},  {1, 2, 200, 16}, {2, 3, 64, 8},
                                {1, 4, 128, 24}, {2, 6, 56, 40}};
  WithThreads([&] {
    for (const DecodeShape& shape : shapes) {
      for (int64_t len : {1, 2, 31, 64, 65, 700}) {
        SCOPED_TRACE(absl::StrCat(ShapeName(shape), " len ", len));
        ExpectDecodeMatches(MakeDecodeBatch(shape, {len}, 4.0f, rng), GetParam());
      }
    }
  });
}

// Several sequences of different lengths in one call: items of different
// sequences share the threads and each sequence is merged on its own.
TEST_P(DecodeTest, BatchOfSequences) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  WithThreads([&] {
    for (const DecodeShape& shape : {DecodeShape{4, 4, 128, 16}, DecodeShape{2, 8, 64, 16}}) {
      SCOPED_TRACE(ShapeName(shape));
      ExpectDecodeMatches(MakeDecodeBatch(shape, {1, 4096, 17, 300, 16, 1000, 2, 2500}, 2.0f, rng),
                          GetParam());
    }
  });
}

// A sequence's output is the same bits alone, batched with others of any
// lengths, and on any thread count: its chunks depend on its own length
// only, so a request's logits do not depend on what shares its step.
TEST_P(DecodeTest, ResultDoesNotDependOnTheBatchOrThreads) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const DecodeShape shape{2, 4, 64, 16};
  const std::vector<int64_t> lens = {3000, 1, 700, 64, 4096, 17};
  const DecodeBatch b = MakeDecodeBatch(shape, lens, 2.0f, rng);
  const int64_t heads = shape.kv_heads * shape.group, qd = heads * shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  auto run = [&](const std::vector<size_t>& which, int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<std::vector<float>> out(which.size(), std::vector<float>(qd));
    std::vector<DecodeQuery> queries;
    for (size_t i = 0; i < which.size(); ++i) {
      const size_t s = which[i];
      queries.push_back({b.q[s].data(), b.tables[s].data(), b.lens[s], out[i].data()});
    }
    AttendDecode(queries.data(), static_cast<int64_t>(queries.size()), heads, b.layer, scale,
                 GetParam());
    omp_set_num_threads(saved);
    return out;
  };
  const auto batched = run({0, 1, 2, 3, 4, 5}, 4);
  for (size_t s = 0; s < lens.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("sequence of ", lens[s], " keys"));
    EXPECT_EQ(run({s}, 1)[0], batched[s]) << "alone, one thread";
    EXPECT_EQ(run({s}, 4)[0], batched[s]) << "alone, four threads";
    EXPECT_EQ(run({s, 4, 0}, 2)[0], batched[s]) << "with other company";
  }
}

// The running maximum grows through the whole context (each key's scores
// larger than the last's), so the accumulator is rescaled on every tile
// and the chunks' maxima differ widely when merged.
TEST_P(DecodeTest, RisingScores) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  WithThreads([&] {
    const DecodeShape shape{2, 4, 64, 16};
    DecodeBatch b = MakeDecodeBatch(shape, {3000}, 1.0f, rng);
    // q = (1, 1, ...) and every element of key t equal to c * t: a score of
    // scale * head_dim * c * t = 12 t / len, rising with the position t
    // (the last key outweighs the first by e^12).
    const int64_t row = shape.kv_heads * shape.head_dim, len = b.lens[0];
    const float c =
        12.0f / (std::sqrt(static_cast<float>(shape.head_dim)) * static_cast<float>(len));
    for (auto& x : b.q[0]) x = 1.0f;
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t i = 0; i < row; ++i) {
        b.k[0][static_cast<size_t>(t * row + i)] = c * static_cast<float>(t);
      }
    }
    WriteKv(b.layer, b.tables[0].data(), 0, len, b.k[0].data(), b.v[0].data());
    ExpectDecodeMatches(b, GetParam());
  });
}

// AttendSequence with one query is the decode path: same output, bit for bit.
TEST(AttentionTest, SingleQueryAttendSequenceIsDecode) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const DecodeShape shape{2, 4, 128, 16};
  DecodeBatch b = MakeDecodeBatch(shape, {777}, 1.0f, rng);
  const int64_t qd = shape.kv_heads * shape.group * shape.head_dim;
  std::vector<float> a(static_cast<size_t>(qd)), d(a.size());
  const float scale = 0.125f;
  AttendSequence(b.q[0].data(), 1, shape.kv_heads * shape.group, b.layer, b.tables[0].data(), 776,
                 scale, a.data());
  const DecodeQuery dq{b.q[0].data(), b.tables[0].data(), 777, d.data()};
  AttendDecode(&dq, 1, shape.kv_heads * shape.group, b.layer, scale);
  EXPECT_EQ(a, d);
}

// A prefill chunk's token gets the same bits as a decode step at its
// position: every query runs as a decode query of its own length.
TEST(AttentionTest, PrefillTokensEqualDecodeQueriesAtTheirPositions) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const Case c{2, 4, 64, 16, 40, 70, 1.0f};
  const int64_t heads = c.kv_heads * c.group;
  const int64_t total = c.first_pos + c.n;
  const int64_t row = c.kv_heads * c.head_dim;
  const std::vector<float> k = Normal(rng, total * row), v = Normal(rng, total * row);
  const int64_t qrow = heads * c.head_dim;
  const std::vector<float> q = Normal(rng, c.n * qrow);
  PagedCache pc = MakeCache(c, total, rng);
  WriteKv(pc.layer, pc.table.data(), 0, total, k.data(), v.data());
  const float scale = 0.125f;
  std::vector<float> chunk(q.size()), one(static_cast<size_t>(qrow));
  AttendSequence(q.data(), c.n, heads, pc.layer, pc.table.data(), c.first_pos, scale, chunk.data());
  for (int64_t t = 0; t < c.n; ++t) {
    AttendSequence(q.data() + t * qrow, 1, heads, pc.layer, pc.table.data(), c.first_pos + t,
                   scale, one.data());
    ASSERT_EQ(std::memcmp(one.data(), chunk.data() + t * qrow, sizeof(float) * qrow), 0)
        << "token " << t << " of the chunk";
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, DecodeTest,
                         ::testing::Values(KernelIsa::kScalar, KernelIsa::kAvx2,
                                           KernelIsa::kAvx512),
                         [](const ::testing::TestParamInfo<KernelIsa>& info) {
                           switch (info.param) {
                             case KernelIsa::kScalar:
                               return std::string("Portable");
                             case KernelIsa::kAvx2:
                               return std::string("Avx2");
                             default:
                               return std::string("Avx512");
                           }
                         });

}  // namespace
}  // namespace tandem::ops
