// The packed bf16 kernel (bf16_packed.h): PackedBf16Index against the
// bytes oneDNN's PackBf16 writes, the kernel against the plain reference,
// its batch and thread invariance, and Linear's use of it. Random inputs
// from a fresh seed each run, printed on failure.
#include "cpu_worker/ops/bf16_packed.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/onednn_matmul.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

std::vector<float> Normal(std::mt19937& rng, int64_t count) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = dist(rng);
  return v;
}

struct PackedWeight {
  int64_t n = 0, k = 0;
  std::vector<uint16_t> rows;  // [n, k] row-major
  std::shared_ptr<uint16_t> packed;
};

PackedWeight MakePacked(std::mt19937& rng, int64_t n, int64_t k) {
  PackedWeight w;
  w.n = n;
  w.k = k;
  const std::vector<float> f = Normal(rng, n * k);
  w.rows.resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) w.rows[i] = F32ToBf16(f[i]);
  const int64_t bytes = internal::PackedBf16Bytes(n, k);
  auto* p =
      static_cast<uint16_t*>(std::aligned_alloc(64, static_cast<size_t>(bytes + 63) / 64 * 64));
  std::memset(p, 0xee, static_cast<size_t>(bytes));
  w.packed.reset(p, [](uint16_t* q) { std::free(q); });
  internal::PackBf16(w.rows.data(), n, k, p);
  return w;
}

// Shapes: inside one block, partial runs and blocks, several runs, and the
// dense bench model's projections' widths.
struct Shape {
  int64_t n, k;
};
const Shape kShapes[] = {{64, 32}, {100, 80}, {130, 544}, {192, 1000}, {320, 2048}, {96, 5632}};

TEST(PackedBf16Test, IndexNamesWhereOnednnPacksEachElement) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << ", k " << s.k);
    const PackedWeight w = MakePacked(rng, s.n, s.k);
    const int64_t elements = internal::PackedBf16Elements(s.n, s.k);
    ASSERT_EQ(internal::PackedBf16Bytes(s.n, s.k), 2 * elements);
    std::vector<char> named(static_cast<size_t>(elements), 0);
    for (int64_t j = 0; j < s.n; ++j) {
      for (int64_t i = 0; i < s.k; ++i) {
        const int64_t at = internal::PackedBf16Index(j, i, s.k);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, elements);
        ASSERT_EQ(w.packed.get()[at], w.rows[static_cast<size_t>(j * s.k + i)])
            << "j " << j << ", i " << i;
        named[static_cast<size_t>(at)] = 1;
      }
    }
    // The padding the index never names is zero, as the kernel needs.
    for (int64_t e = 0; e < elements; ++e) {
      if (named[static_cast<size_t>(e)] == 0) {
        ASSERT_EQ(w.packed.get()[e], 0) << "element " << e;
      }
    }
  }
}

// Each output within 1e-5 of the sum of |x w| of the reference's double sum
// (f32 sums of up to 5632 products, random signs: a few 1e-6 of it). A
// pair left out or counted twice moves an output by about 1/k of that sum.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const std::vector<float>& x, const PackedWeight& w, int64_t m) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < w.n; ++j) {
      double scale = 0.0;
      for (int64_t i = 0; i < w.k; ++i) {
        scale += std::fabs(Bf16ToF32(F32ToBf16(x[static_cast<size_t>(r * w.k + i)])) *
                           Bf16ToF32(w.rows[static_cast<size_t>(j * w.k + i)]));
      }
      const size_t at = static_cast<size_t>(r * w.n + j);
      ASSERT_NEAR(got[at], want[at], 1e-5 * scale + 1e-30) << "row " << r << ", output " << j;
    }
  }
}

TEST(PackedBf16Test, KernelMatchesReference) {
  if (!internal::PackedBf16KernelHere()) GTEST_SKIP() << "no AVX512-BF16 here";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (const Shape& s : kShapes) {
    const PackedWeight w = MakePacked(rng, s.n, s.k);
    const std::vector<float> bias = Normal(rng, s.n);
    for (int64_t m : {1, 2, 5, 6, 7, 13, 16, 32, 33}) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "n " << s.n << ", k " << s.k << ", m " << m << (with_bias ? ", bias" : ""));
        const std::vector<float> x = Normal(rng, m * s.k);
        const float* b = with_bias ? bias.data() : nullptr;
        // One sentinel past the outputs: nothing past row m - 1 is written.
        std::vector<float> got(static_cast<size_t>(m * s.n + 1), -7.0f);
        std::vector<float> want(static_cast<size_t>(m * s.n));
        internal::PackedBf16Linear(x.data(), m, w.packed.get(), s.n, s.k, b, got.data());
        internal::ReferencePackedBf16Linear(x.data(), m, w.packed.get(), s.n, s.k, b, want.data());
        ASSERT_EQ(got.back(), -7.0f);
        got.pop_back();
        ExpectNear(got, want, x, w, m);
      }
    }
  }
}

// A row's result is the same bits whatever rows share the call, however
// many there are, and on one thread or two.
TEST(PackedBf16Test, RowResultDoesNotDependOnTheBatchOrThreads) {
  if (!internal::PackedBf16KernelHere()) GTEST_SKIP() << "no AVX512-BF16 here";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  constexpr int64_t kRows = 40;
  const PackedWeight w = MakePacked(rng, 320, 1056);
  const std::vector<float> x = Normal(rng, kRows * w.k);
  std::vector<float> all(static_cast<size_t>(kRows * w.n));
  internal::PackedBf16Linear(x.data(), kRows, w.packed.get(), w.n, w.k, nullptr, all.data());
  const int threads = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    for (int64_t m = 1; m <= kRows; ++m) {
      // Rows [kRows - m, kRows): each row at another place in the call.
      const int64_t first = kRows - m;
      std::vector<float> y(static_cast<size_t>(m * w.n));
      internal::PackedBf16Linear(x.data() + first * w.k, m, w.packed.get(), w.n, w.k, nullptr,
                                 y.data());
      ASSERT_EQ(std::memcmp(y.data(), all.data() + first * w.n, y.size() * sizeof(float)), 0)
          << "m " << m << ", threads " << t;
    }
  }
  omp_set_num_threads(threads);
}

// Grouped calls give each call the bits it gets alone: calls on a shared x
// (rounded once), on other x, an empty call, bias on some, one and two
// threads, and a call past the kernel's slice of 32 rows.
TEST(PackedBf16Test, GroupedCallsGiveEachCallItsOwnBits) {
  if (!internal::PackedBf16KernelHere()) GTEST_SKIP() << "no AVX512-BF16 here";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const PackedWeight q = MakePacked(rng, 256, 544), kv = MakePacked(rng, 70, 544);
  const PackedWeight down = MakePacked(rng, 130, 1000);
  const std::vector<float> bias = Normal(rng, 256);
  const std::vector<float> x = Normal(rng, 40 * 544), x2 = Normal(rng, 40 * 544);
  const std::vector<float> h = Normal(rng, 40 * 1000);
  struct Case {
    const PackedWeight* w;
    const float* x;
    int64_t m;
    const float* bias;
  };
  const Case cases[] = {{&q, x.data(), 3, bias.data()},  {&kv, x.data(), 3, nullptr},
                        {&kv, x.data(), 3, bias.data()}, {&q, x2.data(), 3, nullptr},
                        {&q, x.data(), 5, nullptr},      {&down, h.data(), 0, nullptr},
                        {&down, h.data(), 1, nullptr},   {&q, x2.data(), 40, bias.data()}};
  constexpr int64_t kCount = std::size(cases);
  std::vector<std::vector<float>> alone(kCount), grouped(kCount);
  std::vector<internal::PackedBf16Call> calls;
  for (int64_t c = 0; c < kCount; ++c) {
    const Case& a = cases[c];
    alone[c].assign(static_cast<size_t>(a.m * a.w->n), 0.0f);
    grouped[c].assign(alone[c].size(), -1.0f);
    internal::PackedBf16Linear(a.x, a.m, a.w->packed.get(), a.w->n, a.w->k, a.bias,
                               alone[c].data());
    calls.push_back({a.x, a.m, a.w->packed.get(), a.w->n, a.w->k, a.bias, grouped[c].data()});
  }
  const int threads = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    for (auto& g : grouped) std::fill(g.begin(), g.end(), -1.0f);
    internal::PackedBf16LinearGroup(calls.data(), kCount);
    for (int64_t c = 0; c < kCount; ++c) {
      ASSERT_EQ(std::memcmp(grouped[c].data(), alone[c].data(), alone[c].size() * sizeof(float)), 0)
          << "call " << c << ", threads " << t;
    }
  }
  omp_set_num_threads(threads);
}

// Linear sends decode-sized batches on packed bf16 weights here, and
// LinearGroup its groups of them, the same bits as the kernel called alone.
TEST(PackedBf16Test, LinearRunsDecodeBatchesOnTheKernel) {
  if (!internal::PackedBf16KernelHere() || !internal::Bf16PacksHere()) {
    GTEST_SKIP() << "bf16 weights are not packed here (Bf16PacksHere)";
  }
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const int64_t n = 200, k = 512;
  const std::vector<float> f = Normal(rng, n * k);
  std::vector<uint16_t> rows(f.size());
  for (size_t i = 0; i < f.size(); ++i) rows[i] = F32ToBf16(f[i]);
  TensorView v;
  v.dtype = DType::kBF16;
  v.shape = {n, k};
  v.data = rows.data();
  v.nbytes = static_cast<int64_t>(rows.size() * 2);
  auto lw = LinearWeight::Create(v, ComputeType::kBF16, WeightLayout::kCpuPacked);
  ASSERT_TRUE(lw.ok()) << lw.status();
  ASSERT_EQ(lw->storage(), WeightStorage::kBF16Packed);
  const std::vector<float> bias = Normal(rng, n);
  for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{16}, internal::kPackedBf16KernelMaxRows}) {
    SCOPED_TRACE(::testing::Message() << "m " << m);
    const std::vector<float> x = Normal(rng, m * k);
    std::vector<float> got(static_cast<size_t>(m * n)), want(got.size());
    Linear(x.data(), m, *lw, bias.data(), got.data());
    internal::PackedBf16Linear(x.data(), m, lw->data(), n, k, bias.data(), want.data());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    std::vector<float> first(got.size()), second(got.size());
    const LinearCall group[] = {{x.data(), m, &*lw, bias.data(), first.data()},
                                {x.data(), m, &*lw, nullptr, second.data()}};
    LinearGroup(group, 2);
    ASSERT_EQ(std::memcmp(first.data(), want.data(), got.size() * sizeof(float)), 0);
    internal::PackedBf16Linear(x.data(), m, lw->data(), n, k, nullptr, want.data());
    ASSERT_EQ(std::memcmp(second.data(), want.data(), got.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace tandem::ops
