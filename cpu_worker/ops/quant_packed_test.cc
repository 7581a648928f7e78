// Q8_0, Q4_0 and Q4_1 weights packed at load (quant_packed.h): the layout
// against its plain inverse, the packed int8 kernel against the reference
// on the rounded activations and against the in-place int8 kernel, its
// batch and thread invariance, the dequantization for the larger batches
// against ConvertToF32, and LinearWeight's choice of the layout. Random
// inputs from a fresh seed each run, printed on failure.
#include "cpu_worker/ops/quant_packed.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/quant.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/mlp.h"
#include "cpu_worker/ops/quant_gemv.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"
#include "cpu_worker/ops/quantize_test_inputs.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

using internal::PackedQuantRowBytes;

// Every type the packed kernel takes.
const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1};

std::string Name(DType t) { return std::string(DTypeName(t)); }

struct QuantWeight {
  DType t = DType::kQ8_0;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> blocks;  // GGUF rows
  std::vector<uint8_t> packed;  // PackQuant of them
  std::vector<float> deq;       // [n, k]
};

std::vector<float> Normal(std::mt19937& rng, int64_t count) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = dist(rng);
  return v;
}

QuantWeight MakeQuant(std::mt19937& rng, DType t, int64_t n, int64_t k) {
  QuantWeight w;
  w.t = t;
  w.n = n;
  w.k = k;
  const std::vector<float> f = Normal(rng, n * k);
  w.blocks.resize(static_cast<size_t>(DTypeBytes(t, n * k).value()));
  QuantizeFromF32(t, f.data(), n * k, w.blocks.data());
  w.packed.assign(static_cast<size_t>(internal::PackedQuantBytes(t, n, k)), 0xee);
  internal::PackQuant(t, w.blocks.data(), n, k, w.packed.data());
  w.deq.resize(f.size());
  ConvertToF32(t, w.blocks.data(), n * k, w.deq.data());
  return w;
}

// Input widths: one block, fewer than a superblock, exactly one, one and a
// remainder, the common remainder of 8 blocks (k = 2816, 11008), and the
// dense bench model's down projection (176 blocks, rows padded to 64).
const int64_t kWidths[] = {32, 224, 512, 544, 2816, 5632};

TEST(QuantPackedTest, UnpacksToTheSameBlocksAndPadsWithZeros) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (DType t : kTypes) {
    for (int64_t k : kWidths) {
      SCOPED_TRACE(::testing::Message() << Name(t) << ", k " << k);
      const QuantWeight w = MakeQuant(rng, t, 5, k);
      const int64_t row_bytes = PackedQuantRowBytes(t, k);
      const int64_t used = k / 32 * DTypeBlockBytes(t);
      ASSERT_EQ(row_bytes % 64, 0);
      ASSERT_GE(row_bytes, used);
      ASSERT_LT(row_bytes - used, 64);
      EXPECT_NE(std::memcmp(w.packed.data(), w.blocks.data(), static_cast<size_t>(used)), 0)
          << "the packed row is the GGUF row";
      for (int64_t j = 0; j < w.n; ++j) {
        const uint8_t* row = w.packed.data() + j * row_bytes;
        std::vector<uint8_t> back(static_cast<size_t>(used));
        internal::UnpackQuantRow(t, row, k, back.data());
        EXPECT_EQ(std::memcmp(back.data(), w.blocks.data() + j * used, static_cast<size_t>(used)),
                  0)
            << "row " << j;
        for (int64_t b = used; b < row_bytes; ++b) EXPECT_EQ(row[b], 0) << "byte " << b;
      }
    }
  }
}

// The packed kernel runs on AVX-512 BW, with or without VNNI.
bool KernelRuns() { return MaxKernelIsa() >= KernelIsa::kAvx512; }

// sum_l |x_hat[i, l] * w[j, l]| (+ |bias|): the scale of an output's
// rounding error. Q4_1's kernel adds m_w * d_x * sum of q apart from the
// d_w * q part, whose magnitudes can exceed |w| together; the bounds below
// leave room for that.
double Magnitude(const std::vector<float>& xh, int64_t i, const QuantWeight& w, int64_t j) {
  double mag = 0;
  for (int64_t l = 0; l < w.k; ++l) mag += std::fabs(double{xh[i * w.k + l]} * w.deq[j * w.k + l]);
  return mag;
}

// The packed kernel computes x_hat · W_deq^T with exact integer dot
// products: against the double reference on the rounded activations only
// f32 scaling and summation error remains (1e-5 of sum |x_hat w|), and
// against the in-place int8 kernel (the same products, summed in another
// order) the same bound twice.
TEST(QuantPackedTest, KernelMatchesTheReferenceAndTheInPlaceKernel) {
  if (!KernelRuns()) GTEST_SKIP() << "no AVX-512 BW (or TANDEM_CPU_ISA caps it)";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (DType t : kTypes) {
    for (int64_t k : kWidths) {
      for (int64_t m : {1, 2, 3, 8, 9, 17}) {
        SCOPED_TRACE(::testing::Message() << Name(t) << ", k " << k << ", m " << m);
        const int64_t n = 1 + static_cast<int64_t>(rng() % 70);
        const QuantWeight w = MakeQuant(rng, t, n, k);
        const std::vector<float> x = Normal(rng, m * k);
        const std::vector<float> bias = Normal(rng, n);
        std::vector<float> xh(x.size());
        for (int64_t i = 0; i < m; ++i) {
          internal::QuantizeActivationsReference(x.data() + i * k, k, xh.data() + i * k);
        }
        std::vector<float> ref(static_cast<size_t>(m * n)), y(ref.size(), NAN), y0(ref.size());
        ReferenceLinear(xh.data(), m, w.deq.data(), n, k, bias.data(), ref.data());
        internal::PackedQuantLinear(t, x.data(), m, w.packed.data(), n, k, bias.data(), y.data());
        internal::QuantLinear(x.data(), m, w.blocks.data(), t, n, k, bias.data(), y0.data(),
                              MaxKernelIsa());
        int failures = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const double mag = Magnitude(xh, i, w, j) + std::fabs(bias[j]);
            const size_t at = static_cast<size_t>(i * n + j);
            if (!(std::fabs(y[at] - ref[at]) <= 1e-5 * mag) && failures++ < 5) {
              ADD_FAILURE() << "y[" << i << ", " << j << "] = " << y[at] << ", reference "
                            << ref[at];
            }
            if (!(std::fabs(y[at] - y0[at]) <= 2e-5 * mag) && failures++ < 5) {
              ADD_FAILURE() << "y[" << i << ", " << j << "] = " << y[at] << ", in place " << y0[at];
            }
          }
        }
      }
    }
  }
}

// A row's result is the same bits whatever else shares the call and
// however many threads run it (its superblocks are summed in order), at a
// width whose tiles pass whole and one (5632) whose decode batches pass in
// spans of superblocks.
TEST(QuantPackedTest, RowResultDoesNotDependOnTheBatchOrThreads) {
  if (!KernelRuns()) GTEST_SKIP() << "no AVX-512 BW (or TANDEM_CPU_ISA caps it)";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const int64_t n = 300;
  const int threads = omp_get_max_threads();
  std::vector<std::pair<int64_t, DType>> cases;
  for (int64_t k : {2816, 5632}) {
    for (DType t : kTypes) cases.emplace_back(k, t);
  }
  for (const auto& [k, t] : cases) {
    SCOPED_TRACE(::testing::Message() << Name(t) << " k " << k);
    const QuantWeight w = MakeQuant(rng, t, n, k);
    // Past two slices of rows (PackedQuantLinear's), a short last one.
    const int64_t slice = internal::PackedQuantSliceRows(k);
    ASSERT_GT(slice, 32);
    const int64_t rows = 2 * slice + 7;
    const std::vector<float> x = Normal(rng, rows * k);
    std::vector<float> all(static_cast<size_t>(rows * n));
    internal::PackedQuantLinear(t, x.data(), rows, w.packed.data(), n, k, nullptr, all.data());
    std::vector<int64_t> sizes;
    for (int64_t m = 1; m <= 32; ++m) sizes.push_back(m);
    for (int64_t m : {slice - 1, slice, slice + 5, rows}) sizes.push_back(m);
    for (int64_t m : sizes) {
      omp_set_num_threads(m % 2 == 0 ? 1 : threads);
      const int64_t first = static_cast<int64_t>(rng() % (rows - m + 1));
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      internal::PackedQuantLinear(t, x.data() + first * k, m, w.packed.data(), n, k, nullptr,
                                  y.data());
      EXPECT_TRUE(std::equal(y.begin(), y.end(), all.begin() + first * n))
          << "rows " << first << ".." << first + m - 1 << " alone differ from the same rows in "
          << rows;
    }
    omp_set_num_threads(threads);
  }
}

// The kernel's vectorized activation quantization and interleaving against
// the plain loop, byte for byte, on activations hard to quantize.
TEST(QuantPackedTest, QuantizesActivationsAsThePlainLoop) {
  if (!KernelRuns()) GTEST_SKIP() << "no AVX-512 BW (or TANDEM_CPU_ISA caps it)";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (const int64_t k : kWidths) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    const int64_t nb = k / 32, supers = (nb + 15) / 16;
    const std::vector<float> x = HardToQuantize(rng, k);
    std::vector<internal::quant::ActQ8Packed> want(static_cast<size_t>(supers));
    std::vector<internal::quant::ActQ8Packed> got(static_cast<size_t>(supers));
    std::memset(got.data(), 0xee, got.size() * sizeof(got[0]));
    internal::ReferencePrepPackedQ8Row(x.data(), nb, want.data());
    internal::quant::PrepPackedQ8RowAvx512(x.data(), nb, got.data());
    for (int64_t s = 0; s < supers; ++s) {
      SCOPED_TRACE(::testing::Message() << "superblock " << s);
      const auto& w = want[static_cast<size_t>(s)];
      const auto& g = got[static_cast<size_t>(s)];
      EXPECT_EQ(std::memcmp(w.q, g.q, sizeof(w.q)), 0);
      for (int lane = 0; lane < 16; ++lane) {
        EXPECT_EQ(w.comp[lane], g.comp[lane]) << "lane " << lane;
        EXPECT_EQ(w.dx[lane], g.dx[lane]) << "lane " << lane;
      }
    }
  }
}

// The larger batches' dequantization: the values ConvertToF32 gives the
// blocks in place, bit for bit (and their bf16 rounding).
TEST(QuantPackedTest, DequantizesAsTheBlocksInPlace) {
  if (!KernelRuns()) GTEST_SKIP() << "no AVX-512 BW (or TANDEM_CPU_ISA caps it)";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (DType t : kTypes) {
    for (int64_t k : kWidths) {
      SCOPED_TRACE(::testing::Message() << Name(t) << ", k " << k);
      const QuantWeight w = MakeQuant(rng, t, 7, k);
      const int64_t r0 = 2, rows = 4;
      std::vector<float> f(static_cast<size_t>(rows * k), NAN);
      std::vector<uint16_t> h(static_cast<size_t>(rows * k), 0xffff);
      // bf16 where the GEMMs take it (AVX512-BF16, which comes with VNNI).
      const bool bf16 = CpuHasBf16();
      internal::DequantPackedQuantRows(t, w.packed.data(), k, r0, rows, f.data());
      if (bf16) internal::DequantPackedQuantRowsBf16(t, w.packed.data(), k, r0, rows, h.data());
      for (int64_t i = 0; i < rows * k; ++i) {
        const float want = w.deq[static_cast<size_t>(r0 * k + i)];
        ASSERT_EQ(f[i], want) << "element " << i;
        if (bf16) {
          ASSERT_EQ(h[i], F32ToBf16(want)) << "element " << i;
        }
      }
    }
  }
}

// The kernel without VNNI gives the VNNI kernel's bits: its integer sums
// are vpdpbusd's exactly (quant_packed_avx512bw.cc), Q8_0's bytes of 128
// and more included. Runs where both do (AVX512-VNNI); on a Skylake-SP the
// comparisons above hold it to the reference instead.
TEST(QuantPackedTest, WithoutVnniTheKernelGivesTheVnniKernelsBits) {
  if (MaxKernelIsa() < KernelIsa::kAvx512Vnni) {
    GTEST_SKIP() << "no AVX512-VNNI here (or TANDEM_CPU_ISA caps it) to compare with";
  }
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (DType t : kTypes) {
    for (int64_t k : kWidths) {
      for (int64_t m : {1, 2, 5, 17}) {
        SCOPED_TRACE(::testing::Message() << Name(t) << ", k " << k << ", m " << m);
        const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
        const QuantWeight w = MakeQuant(rng, t, n, k);
        // Activations at the extremes of the int8 range as well, so that the
        // pairs of products reach their largest magnitudes.
        const std::vector<float> x = HardToQuantize(rng, m * k);
        const std::vector<float> bias = Normal(rng, n);
        const int64_t supers = (k / 32 + 15) / 16;
        std::vector<internal::quant::ActQ8Packed> acts(static_cast<size_t>(m * supers));
        for (int64_t i = 0; i < m; ++i) {
          internal::quant::PrepPackedQ8RowAvx512(x.data() + i * k, k / 32,
                                                 acts.data() + i * supers);
        }
        std::vector<float> vnni(static_cast<size_t>(m * n), NAN), bw(vnni.size(), NAN);
        internal::quant::PackedTask task;
        task.t = t;
        task.w = w.packed.data();
        task.row_bytes = PackedQuantRowBytes(t, k);
        task.m = m;
        task.n = n;
        task.k = k;
        task.acts = acts.data();
        task.act_stride = supers;
        task.bias = bias.data();
        task.y = vnni.data();
        internal::quant::PackedRowsAvx512Vnni(task, 0, n);
        task.y = bw.data();
        internal::quant::PackedRowsAvx512Bw(task, 0, n);
        ASSERT_EQ(std::memcmp(vnni.data(), bw.data(), vnni.size() * sizeof(float)), 0);
      }
    }
  }
}

TensorView View(const QuantWeight& w) {
  TensorView v;
  v.name = "wq";
  v.dtype = w.t;
  v.shape = {w.n, w.k};
  v.data = w.blocks.data();
  v.nbytes = static_cast<int64_t>(w.blocks.size());
  return v;
}

WeightStorage PackedStorage(DType t) {
  return t == DType::kQ8_0   ? WeightStorage::kQ8_0Packed
         : t == DType::kQ4_0 ? WeightStorage::kQ4_0Packed
                             : WeightStorage::kQ4_1Packed;
}

WeightStorage InPlaceStorage(DType t) {
  return t == DType::kQ8_0   ? WeightStorage::kQ8_0
         : t == DType::kQ4_0 ? WeightStorage::kQ4_0
                             : WeightStorage::kQ4_1;
}

// LinearWeight packs quantized weights for the host's own kernels where
// QuantPacksHere holds, never for a layout others read. Every batch size
// then gives x_hat times the dequantized weight: on the packed int8 kernel
// (up to kPackedQuantMaxRows rows, or every batch where
// PackedQuantTakesEveryBatch) within its f32 bound of the reference on the
// rounded activations, and within twice that of the in-place int8 kernel
// where that takes the batch too; otherwise the same bits as the blocks in
// place (both dequantize the same values for the same GEMM).
TEST(QuantPackedTest, LinearWeightPacksOnlyForTheCpuAndAgreesWithTheBlocksInPlace) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const int64_t n = 96, k = 2816;
  for (DType t : kTypes) {
    SCOPED_TRACE(Name(t));
    const QuantWeight w = MakeQuant(rng, t, n, k);
    for (WeightLayout layout : {WeightLayout::kInPlace, WeightLayout::kForDevice}) {
      auto lw = LinearWeight::Create(View(w), ComputeType::kQuantized, layout);
      ASSERT_TRUE(lw.ok()) << lw.status();
      EXPECT_EQ(lw->storage(), InPlaceStorage(t));
      EXPECT_EQ(lw->data(), w.blocks.data());
    }
    auto f32 = LinearWeight::Create(View(w), ComputeType::kF32, WeightLayout::kCpuPacked);
    ASSERT_TRUE(f32.ok()) << f32.status();
    EXPECT_EQ(f32->storage(), WeightStorage::kF32);

    auto packed = LinearWeight::Create(View(w), ComputeType::kQuantized, WeightLayout::kCpuPacked);
    auto in_place = LinearWeight::Create(View(w), ComputeType::kQuantized);
    ASSERT_TRUE(packed.ok() && in_place.ok());
    if (!internal::QuantPacksHere()) {
      EXPECT_EQ(packed->storage(), InPlaceStorage(t));
      GTEST_SKIP() << "quantized weights are not packed here (no AVX-512 BW, or AMX is usable)";
    }
    ASSERT_EQ(packed->storage(), PackedStorage(t));
    EXPECT_TRUE(packed->quantized());
    EXPECT_TRUE(packed->packed_quant());
    EXPECT_EQ(packed->block_type(), t);
    EXPECT_EQ(packed->nbytes(), internal::PackedQuantBytes(t, n, k));
    EXPECT_NE(packed->data(), w.blocks.data());
    // 150: two of PackedQuantLinear's slices at this k.
    for (int64_t m : {1, 4, 8, 9, 16, 32, 33, 70, 150}) {
      const std::vector<float> x = Normal(rng, m * k);
      std::vector<float> y(static_cast<size_t>(m * n), NAN), y0(y.size(), NAN);
      Linear(x.data(), m, *packed, nullptr, y.data());
      Linear(x.data(), m, *in_place, nullptr, y0.data());
      if (m > internal::kPackedQuantMaxRows && !internal::PackedQuantTakesEveryBatch()) {
        EXPECT_TRUE(std::equal(y.begin(), y.end(), y0.begin()))
            << "m " << m << ": the packed weight's dequantized batch differs from in place";
        continue;
      }
      std::vector<float> xh(x.size()), ref(y.size());
      for (int64_t i = 0; i < m; ++i) {
        internal::QuantizeActivationsReference(x.data() + i * k, k, xh.data() + i * k);
      }
      ReferenceLinear(xh.data(), m, w.deq.data(), n, k, nullptr, ref.data());
      const bool both_int8 = internal::QuantLinearUsesGemv(m);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const double mag = Magnitude(xh, i, w, j);
          const size_t at = static_cast<size_t>(i * n + j);
          EXPECT_NEAR(y[at], ref[at], 1e-5 * mag) << "m " << m << ", y[" << i << ", " << j << "]";
          if (both_int8) {
            EXPECT_NEAR(y[at], y0[at], 2e-5 * mag)
                << "m " << m << ", in place, y[" << i << ", " << j << "]";
          }
        }
      }
    }
  }
}

// LinearGroup and RunMlps against the calls one by one, bit for bit: calls
// of different shapes and types in one group, two on the same x (quantized
// once), an empty one, with and without bias, on one thread and on all; a
// group with a call past the int8 kernel's rows (run one by one); and three
// experts' MLPs of 1, 2 and 1 rows.
TEST(QuantPackedTest, GroupedCallsGiveEachCallItsOwnBits) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<QuantWeight> q;
  std::vector<LinearWeight> w;
  struct Shape {
    DType t;
    int64_t n, k;
  };
  for (const Shape& s : {Shape{DType::kQ8_0, 96, 2816}, Shape{DType::kQ4_0, 200, 544},
                         Shape{DType::kQ4_1, 64, 2816}, Shape{DType::kQ4_0, 48, 2816}}) {
    q.push_back(MakeQuant(rng, s.t, s.n, s.k));
    auto lw =
        LinearWeight::Create(View(q.back()), ComputeType::kQuantized, WeightLayout::kCpuPacked);
    ASSERT_TRUE(lw.ok()) << lw.status();
    w.push_back(*std::move(lw));
  }
  if (!internal::QuantPacksHere()) GTEST_SKIP() << "quantized weights are not packed here";
  const std::vector<float> xa = Normal(rng, 2816), xb = Normal(rng, 3 * 544);
  const std::vector<float> xc = Normal(rng, 32 * 2816), xd = Normal(rng, 33 * 544);
  const std::vector<float> bias = Normal(rng, 200);
  struct Case {
    const float* x;
    int64_t m;
    int weight;
    const float* bias;
  };
  const std::vector<std::vector<Case>> groups = {
      {{xa.data(), 1, 0, nullptr},
       {xa.data(), 1, 2, nullptr},
       {xb.data(), 3, 1, bias.data()},
       {xb.data(), 0, 1, nullptr},
       {xc.data(), 32, 0, nullptr},
       {xa.data(), 1, 3, bias.data()}},
      {{xa.data(), 1, 2, nullptr}, {xd.data(), 33, 1, bias.data()}},
  };
  const int threads = omp_get_max_threads();
  for (int t : {1, threads}) {
    omp_set_num_threads(t);
    for (size_t g = 0; g < groups.size(); ++g) {
      SCOPED_TRACE(::testing::Message() << "group " << g << ", threads " << t);
      std::vector<std::vector<float>> got, want;
      std::vector<LinearCall> calls;
      for (const Case& c : groups[g]) {
        const LinearWeight& lw = w[static_cast<size_t>(c.weight)];
        want.emplace_back(static_cast<size_t>(c.m * lw.rows()) + 1, 7.0f);
        got.emplace_back(want.back().size(), 7.0f);
        Linear(c.x, c.m, lw, c.bias, want.back().data());
      }
      for (size_t i = 0; i < groups[g].size(); ++i) {
        const Case& c = groups[g][i];
        calls.push_back({c.x, c.m, &w[static_cast<size_t>(c.weight)], c.bias, got[i].data()});
      }
      LinearGroup(calls.data(), static_cast<int64_t>(calls.size()));
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "call " << i;
    }
  }
  omp_set_num_threads(threads);

  // Experts of hidden 544 and ffn 224: gate and up 224 x 544, down 544 x
  // 224, each expert of another type.
  std::vector<MlpWeights> experts;
  for (int e = 0; e < 3; ++e) {
    MlpWeights m;
    const DType t = kTypes[e];
    for (LinearWeight* part : {&m.gate, &m.up, &m.down}) {
      q.push_back(part == &m.down ? MakeQuant(rng, t, 544, 224) : MakeQuant(rng, t, 224, 544));
      auto lw =
          LinearWeight::Create(View(q.back()), ComputeType::kQuantized, WeightLayout::kCpuPacked);
      ASSERT_TRUE(lw.ok()) << lw.status();
      *part = *std::move(lw);
    }
    experts.push_back(std::move(m));
  }
  const std::vector<float> x = Normal(rng, 4 * 544);
  std::vector<float> want(4 * 544), got(4 * 544, 7.0f);
  const int64_t rows[] = {1, 2, 1}, first[] = {0, 1, 3};
  MlpScratch scratch;
  std::vector<MlpCall> calls;
  for (int e = 0; e < 3; ++e) {
    RunMlp(experts[static_cast<size_t>(e)], x.data() + first[e] * 544, rows[e],
           want.data() + first[e] * 544, scratch);
    calls.push_back({&experts[static_cast<size_t>(e)], x.data() + first[e] * 544, rows[e],
                     got.data() + first[e] * 544});
  }
  RunMlps(calls.data(), 3, scratch);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tandem::ops
