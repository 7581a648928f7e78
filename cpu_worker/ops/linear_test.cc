#include "cpu_worker/ops/linear.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "cpu_worker/ops/amx_linear.h"
#include "cpu_worker/ops/bf16_dot_linear.h"
#include "cpu_worker/ops/bf16_packed.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/gemv.h"
#include "cpu_worker/ops/onednn_matmul.h"
#include "cpu_worker/ops/stream_prefetch.h"
#include "cpu_worker/ops/widened_linear.h"
#include "gtest/gtest.h"

namespace tandem {

void PrintTo(DType t, std::ostream* os) { *os << DTypeName(t); }

namespace ops {
namespace {

uint32_t FreshSeed() { return std::random_device{}(); }

std::vector<float> RandomVec(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

TensorView View(DType t, std::vector<int64_t> shape, const void* data, int64_t nbytes) {
  TensorView v;
  v.name = "w";
  v.dtype = t;
  v.shape = std::move(shape);
  v.data = data;
  v.nbytes = nbytes;
  return v;
}

// A double-accumulated reference on the given f32 inputs, computed once
// and compared with any number of outputs. The allowed error of each
// element scales with sum_l |x_il * w_jl|, the magnitude the accumulation
// works at.
class Reference {
 public:
  Reference(const std::vector<float>& x, int64_t m, const std::vector<float>& w, int64_t n,
            int64_t k, const float* bias)
      : m_(m), n_(n), ref_(static_cast<size_t>(m * n)), mag_(static_cast<size_t>(m * n)) {
    ReferenceLinear(x.data(), m, w.data(), n, k, bias, ref_.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double mag = bias != nullptr ? std::fabs(bias[j]) : 0.0;
        for (int64_t l = 0; l < k; ++l) mag += std::fabs(double{x[i * k + l]} * w[j * k + l]);
        mag_[static_cast<size_t>(i * n + j)] = mag;
      }
    }
  }

  void Expect(const std::vector<float>& y, double rel_tol, const std::string& what) const {
    int failures = 0;
    for (int64_t i = 0; i < m_ * n_; ++i) {
      const auto e = static_cast<size_t>(i);
      const double err = std::fabs(double{y[e]} - ref_[e]);
      if (err > rel_tol * mag_[e] + 1e-30 && failures++ < 5) {
        ADD_FAILURE() << what << ": y[" << i / n_ << ", " << i % n_ << "] = " << y[e]
                      << ", reference " << ref_[e] << ", error " << err << " > " << rel_tol
                      << " * " << mag_[e];
      }
    }
  }

 private:
  int64_t m_, n_;
  std::vector<float> ref_;
  std::vector<double> mag_;
};

void ExpectClose(const std::vector<float>& x, int64_t m, const std::vector<float>& w, int64_t n,
                 int64_t k, const float* bias, const std::vector<float>& y, double rel_tol,
                 const std::string& what) {
  Reference(x, m, w, n, k, bias).Expect(y, rel_tol, what);
}

struct Shape {
  int64_t m, n, k;
};

constexpr internal::GemvWeight kGemvWeights[] = {
    internal::GemvWeight::kF32, internal::GemvWeight::kBF16, internal::GemvWeight::kF16};

const char* GemvWeightName(internal::GemvWeight wt) {
  return wt == internal::GemvWeight::kF32    ? "f32"
         : wt == internal::GemvWeight::kBF16 ? "bf16"
                                             : "f16";
}

// A weight in both storages: f32 values exactly representable in bf16. And
// an f16 weight of its own, with f16's full precision (values bf16 could
// hold would leave the low mantissa bits of every f16 untested).
struct TestWeight {
  std::vector<uint16_t> bf16;  // [n, k]
  std::vector<float> f32;      // [n, k], the same values
  std::vector<uint16_t> f16;   // [n, k]
  std::vector<float> f16_f32;  // [n, k], the f16 values as f32

  // The weight the kernels read for `wt`, and its values.
  const void* Data(internal::GemvWeight wt) const {
    return wt == internal::GemvWeight::kF32    ? static_cast<const void*>(f32.data())
           : wt == internal::GemvWeight::kBF16 ? static_cast<const void*>(bf16.data())
                                               : static_cast<const void*>(f16.data());
  }
  const std::vector<float>& Values(internal::GemvWeight wt) const {
    return wt == internal::GemvWeight::kF16 ? f16_f32 : f32;
  }
};

TestWeight RandomWeight(std::mt19937& rng, int64_t n, int64_t k) {
  TestWeight w;
  w.f32 = RandomVec(rng, n * k);
  w.bf16.resize(w.f32.size());
  for (size_t i = 0; i < w.f32.size(); ++i) {
    w.bf16[i] = F32ToBf16(w.f32[i]);
    w.f32[i] = Bf16ToF32(w.bf16[i]);
  }
  w.f16_f32 = RandomVec(rng, n * k);
  w.f16.resize(w.f16_f32.size());
  for (size_t i = 0; i < w.f16_f32.size(); ++i) {
    w.f16[i] = F32ToF16(w.f16_f32[i]);
    w.f16_f32[i] = F16ToF32(w.f16[i]);
  }
  return w;
}

// {5, 64, 96}, {2, 33, 64} and {24, 70, 512} take the AMX kernel where it
// is usable.
const Shape kShapes[] = {{1, 1, 1},      {1, 7, 5},      {3, 33, 45},  {17, 96, 130},
                         {64, 257, 200}, {1, 300, 1030}, {5, 64, 96},  {64, 48, 16},
                         {2, 33, 64},    {24, 70, 512}};

// Runs `body` on every shape of kShapes, without and with bias, under a
// fresh seed (printed on failure); `what` names the case for messages.
void ForEachShape(
    const char* dtype,
    const std::function<void(std::mt19937&, const Shape&, bool, const std::string&)>& body) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {false, true}) {
      body(rng, s, with_bias,
           absl::StrCat(dtype, " m=", s.m, " n=", s.n, " k=", s.k, with_bias ? " bias" : ""));
    }
  }
}

TEST(LinearTest, F32MatchesReference) {
  ForEachShape("f32", [&](std::mt19937& rng, const Shape& s, bool with_bias,
                          const std::string& what) {
    auto x = RandomVec(rng, s.m * s.k);
    auto w = RandomVec(rng, s.n * s.k);
    auto b = RandomVec(rng, s.n);
    auto lw = LinearWeight::Create(View(DType::kF32, {s.n, s.k}, w.data(), s.n * s.k * 4),
                                   ComputeType::kF32);
    ASSERT_TRUE(lw.ok()) << lw.status();
    EXPECT_EQ(lw->compute_type(), ComputeType::kF32);
    EXPECT_EQ(lw->data(), w.data()) << "f32 weights are used in place";
    EXPECT_EQ(lw->storage(), WeightStorage::kF32);
    EXPECT_EQ(lw->nbytes(), s.n * s.k * 4);
    EXPECT_EQ(lw->rows(), s.n);
    EXPECT_EQ(lw->cols(), s.k);
    std::vector<float> y(static_cast<size_t>(s.m * s.n), NAN);
    Linear(x.data(), s.m, *lw, with_bias ? b.data() : nullptr, y.data());
    ExpectClose(x, s.m, w, s.n, s.k, with_bias ? b.data() : nullptr, y, 1e-5, what);
  });
}

TEST(LinearTest, F32CheckpointStaysF32WhenBf16Preferred) {
  std::vector<float> w(4 * 8, 1.0f);
  auto lw =
      LinearWeight::Create(View(DType::kF32, {4, 8}, w.data(), 4 * 8 * 4), ComputeType::kBF16);
  ASSERT_TRUE(lw.ok());
  EXPECT_EQ(lw->compute_type(), ComputeType::kF32);
  EXPECT_EQ(lw->data(), w.data());
}

// bf16 weights stay where they lie: with AVX512-BF16 they compute in bf16;
// without it, on AVX-512 or AVX2, in f32 on the exactly widened values (the
// isa_f32/ and isa_avx2/ runs of this test), so only f32 accumulation error
// remains.
TEST(LinearTest, Bf16MatchesReference) {
  const bool widened = !CpuHasBf16();
  if (widened && !internal::Bf16WidenedInPlace()) {
    GTEST_SKIP() << "bf16 weights are converted to f32 here (no AVX512-BF16, no AVX2): "
                    "LinearConvertedTest and Bf16CheckpointConvertedWhenF32Preferred";
  }
  ForEachShape("bf16", [&](std::mt19937& rng, const Shape& s, bool with_bias,
                           const std::string& what) {
    auto x = RandomVec(rng, s.m * s.k);
    const TestWeight w = RandomWeight(rng, s.n, s.k);
    const std::vector<float>& w_rounded = w.f32;  // the bf16 weights as f32
    auto b = RandomVec(rng, s.n);
    const TensorView v = View(DType::kBF16, {s.n, s.k}, w.bf16.data(), s.n * s.k * 2);
    for (WeightLayout layout : {WeightLayout::kInPlace, WeightLayout::kCpuPacked}) {
      auto lw = LinearWeight::Create(v, ComputeType::kBF16, layout);
      ASSERT_TRUE(lw.ok()) << lw.status();
      const bool packed = layout == WeightLayout::kCpuPacked && internal::Bf16PacksHere();
      ASSERT_EQ(lw->compute_type(), widened ? ComputeType::kF32 : ComputeType::kBF16);
      ASSERT_EQ(lw->storage(), packed ? WeightStorage::kBF16Packed : WeightStorage::kBF16);
      EXPECT_EQ(lw->data() == w.bf16.data(), !packed) << "bf16 weights in place unless packed";
      EXPECT_EQ(lw->nbytes(),
                packed ? internal::PackedBf16Bytes(s.n, s.k) : s.n * s.k * 2);
      std::vector<float> y(static_cast<size_t>(s.m * s.n), NAN);
      const float* bias = with_bias ? b.data() : nullptr;
      Linear(x.data(), s.m, *lw, bias, y.data());
      const std::string name = absl::StrCat(what, packed ? " packed" : "");
      if (widened) {
        ExpectClose(x, s.m, w_rounded, s.n, s.k, bias, y, 1e-5, absl::StrCat(name, " widened"));
        continue;
      }
      // Against the exact product of the f32 activations: bf16 rounding of x.
      ExpectClose(x, s.m, w_rounded, s.n, s.k, bias, y, 1e-2, name);
      // Tightly, against the product the kernel actually forms: oneDNN
      // (larger batches, and every batch on packed weights) rounds the
      // activations to bf16, the small-batch kernel keeps them f32. Only f32
      // accumulation error remains.
      std::vector<float> x_used = x;
      if (packed || s.m > internal::SmallBatchMaxRows(ComputeType::kBF16) ||
          internal::Bf16UsesAmxKernel(s.m, s.k) || internal::Bf16UsesDotKernel(s.m)) {
        for (auto& v : x_used) v = Bf16ToF32(F32ToBf16(v));
      }
      ExpectClose(x_used, s.m, w_rounded, s.n, s.k, bias, y, 1e-5,
                  absl::StrCat(name, " (activations as the kernel uses them)"));
    }
  });
}

// Packed bf16 weights (WeightLayout::kCpuPacked where Bf16PacksHere holds)
// copy the checkpoint once: the copy outlives the view, and a staged copy
// of its bytes (WithData, as the engine streams weights) computes the same.
TEST(LinearTest, PackedBf16IsAnOwnedCopy) {
  if (!internal::Bf16PacksHere()) {
    GTEST_SKIP() << "bf16 weights are not packed on this CPU (no AVX512-BF16, or AMX)";
  }
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  constexpr int64_t n = 130, k = 96, m = 3;
  auto tw = std::make_unique<TestWeight>(RandomWeight(rng, n, k));
  const std::vector<float> values = tw->f32;
  auto lw = LinearWeight::Create(View(DType::kBF16, {n, k}, tw->bf16.data(), n * k * 2),
                                 ComputeType::kBF16, WeightLayout::kCpuPacked);
  ASSERT_TRUE(lw.ok()) << lw.status();
  ASSERT_EQ(lw->storage(), WeightStorage::kBF16Packed);
  EXPECT_FALSE(lw->quantized());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(lw->data()) % 64, 0u);
  std::fill(tw->bf16.begin(), tw->bf16.end(), uint16_t{0x7fc0});  // NaN: must not be read
  tw.reset();
  auto x = RandomVec(rng, m * k);
  for (auto& v : x) v = Bf16ToF32(F32ToBf16(v));
  std::vector<float> y(static_cast<size_t>(m * n), NAN);
  Linear(x.data(), m, *lw, nullptr, y.data());
  ExpectClose(x, m, values, n, k, nullptr, y, 1e-5, "packed, checkpoint gone");
  std::vector<uint8_t> staged(static_cast<size_t>(lw->nbytes()) + 64);
  uint8_t* at = staged.data() + (64 - reinterpret_cast<uintptr_t>(staged.data()) % 64) % 64;
  std::memcpy(at, lw->data(), static_cast<size_t>(lw->nbytes()));
  std::vector<float> ys(static_cast<size_t>(m * n), NAN);
  Linear(x.data(), m, lw->WithData(at), nullptr, ys.data());
  EXPECT_EQ(std::memcmp(ys.data(), y.data(), y.size() * sizeof(float)), 0) << "staged copy";
}

TEST(LinearTest, Bf16CheckpointConvertedWhenF32Preferred) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const int64_t n = 19, k = 70, m = 3;
  auto wf = RandomVec(rng, n * k);
  std::vector<uint16_t> wb(wf.size());
  std::vector<float> w_rounded(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    wb[i] = F32ToBf16(wf[i]);
    w_rounded[i] = Bf16ToF32(wb[i]);
  }
  auto lw =
      LinearWeight::Create(View(DType::kBF16, {n, k}, wb.data(), n * k * 2), ComputeType::kF32);
  ASSERT_TRUE(lw.ok()) << lw.status();
  ASSERT_EQ(lw->compute_type(), ComputeType::kF32);
  EXPECT_NE(lw->data(), static_cast<const void*>(wb.data()));
  const auto* conv = static_cast<const float*>(lw->data());
  for (size_t i = 0; i < wf.size(); ++i) ASSERT_EQ(conv[i], w_rounded[i]) << i;
  auto x = RandomVec(rng, m * k);
  std::vector<float> y(static_cast<size_t>(m * n));
  Linear(x.data(), m, *lw, nullptr, y.data());
  ExpectClose(x, m, w_rounded, n, k, nullptr, y, 1e-5, "bf16 checkpoint, f32 compute");
}

// f16 weights stay where they lie on CPUs with AVX2 (the isa_scalar/ run
// converts them) and compute in f32 on the exactly widened values, through
// the small-batch kernel and the widened panels; f32 compute or an f32 copy
// asked for converts them at load.
TEST(LinearTest, F16MatchesReference) {
  ForEachShape("f16", [&](std::mt19937& rng, const Shape& s, bool with_bias,
                          const std::string& what) {
    auto x = RandomVec(rng, s.m * s.k);
    const TestWeight w = RandomWeight(rng, s.n, s.k);
    auto b = RandomVec(rng, s.n);
    const TensorView v = View(DType::kF16, {s.n, s.k}, w.f16.data(), s.n * s.k * 2);
    const float* bias = with_bias ? b.data() : nullptr;
    for (ComputeType prefer : {ComputeType::kBF16, ComputeType::kQuantized, ComputeType::kF32}) {
      for (WeightLayout layout :
           {WeightLayout::kInPlace, WeightLayout::kCpuPacked, WeightLayout::kForDevice}) {
        auto lw = LinearWeight::Create(v, prefer, layout);
        ASSERT_TRUE(lw.ok()) << lw.status();
        const bool in_place = prefer != ComputeType::kF32 && layout != WeightLayout::kForDevice &&
                              internal::F16WidenedInPlace();
        ASSERT_EQ(lw->compute_type(), ComputeType::kF32);
        ASSERT_EQ(lw->storage(), in_place ? WeightStorage::kF16 : WeightStorage::kF32);
        EXPECT_EQ(lw->data() == w.f16.data(), in_place);
        EXPECT_EQ(lw->nbytes(), s.n * s.k * (in_place ? 2 : 4));
        EXPECT_FALSE(lw->quantized());
        std::vector<float> y(static_cast<size_t>(s.m * s.n), NAN);
        Linear(x.data(), s.m, *lw, bias, y.data());
        ExpectClose(x, s.m, w.f16_f32, s.n, s.k, bias, y, 1e-5,
                    absl::StrCat(what, in_place ? " in place" : " converted"));
      }
    }
  });
}

// Every stored dtype that is not the compute dtype is converted once at
// load; the GEMM then matches the reference on the converted f32 weights.
// (GGUF block types are converted when f32 compute is asked for; otherwise
// they stay quantized: quant_linear_test.cc. f16 is converted where it is
// not kept in place: F16MatchesReference.)
class LinearConvertedTest : public ::testing::TestWithParam<DType> {};

TEST_P(LinearConvertedTest, MatchesReferenceOnDequantizedWeights) {
  const DType t = GetParam();
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed, " dtype ", std::string(DTypeName(t))));
  std::mt19937 rng(seed);
  for (const Shape& s : {Shape{1, 5, 32}, Shape{3, 17, 96}, Shape{17, 64, 256}}) {
    auto wf = RandomVec(rng, s.n * s.k);
    std::vector<uint8_t> stored(static_cast<size_t>(DTypeBytes(t, s.n * s.k).value()));
    if (t == DType::kF16) {
      auto* h = reinterpret_cast<uint16_t*>(stored.data());
      for (size_t i = 0; i < wf.size(); ++i) h[i] = F32ToF16(wf[i]);
    } else {
      QuantizeFromF32(t, wf.data(), s.n * s.k, stored.data());
    }
    std::vector<float> deq(wf.size());
    ConvertToF32(t, stored.data(), s.n * s.k, deq.data());
    // kBF16 (the default) dequantizes GGUF blocks like kF32; only kQuantized
    // keeps them (tested in quant_linear_test).
    for (ComputeType prefer :
         {ComputeType::kF32, ComputeType::kBF16, ComputeType::kQuantized}) {
      auto lw = LinearWeight::Create(
          View(t, {s.n, s.k}, stored.data(), static_cast<int64_t>(stored.size())), prefer);
      ASSERT_TRUE(lw.ok()) << lw.status();
      if (DTypeIsQuantized(t) && prefer == ComputeType::kQuantized) {
        EXPECT_TRUE(lw->quantized());
        EXPECT_EQ(lw->data(), static_cast<const void*>(stored.data()));
        continue;
      }
      if (t == DType::kF16 && lw->storage() == WeightStorage::kF16) continue;
      ASSERT_EQ(lw->compute_type(), ComputeType::kF32);
      ASSERT_EQ(lw->storage(), WeightStorage::kF32);
      EXPECT_EQ(lw->nbytes(), s.n * s.k * 4);
      const auto* conv = static_cast<const float*>(lw->data());
      for (size_t i = 0; i < deq.size(); ++i) ASSERT_EQ(conv[i], deq[i]) << i;
      auto x = RandomVec(rng, s.m * s.k);
      auto b = RandomVec(rng, s.n);
      std::vector<float> y(static_cast<size_t>(s.m * s.n));
      Linear(x.data(), s.m, *lw, b.data(), y.data());
      ExpectClose(x, s.m, deq, s.n, s.k, b.data(), y, 1e-5,
                  absl::StrCat("m=", s.m, " n=", s.n, " k=", s.k));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(StoredTypes, LinearConvertedTest,
                         ::testing::Values(DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Batch sizes around the switch between the small-batch kernel and oneDNN,
// with n and k that leave tails in every blocking (rows of 8 and 4, lanes of
// 16), through Linear and through both small-batch kernels directly.
TEST(LinearTest, SmallBatchKernelAndSwitchover) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{37, 70}, {8, 16}, {13, 1}, {64, 33}}) {
    auto wf = RandomVec(rng, n * k);
    std::vector<uint16_t> wb(wf.size()), wh(wf.size());
    std::vector<float> w_rounded(wf.size()), wh_rounded(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
      wb[i] = F32ToBf16(wf[i]);
      w_rounded[i] = Bf16ToF32(wb[i]);
      wh[i] = F32ToF16(wf[i]);
      wh_rounded[i] = F16ToF32(wh[i]);
    }
    auto b = RandomVec(rng, n);
    auto lw32 =
        LinearWeight::Create(View(DType::kF32, {n, k}, wf.data(), n * k * 4), ComputeType::kF32);
    auto lw16 =
        LinearWeight::Create(View(DType::kBF16, {n, k}, wb.data(), n * k * 2), ComputeType::kBF16);
    auto lwh =
        LinearWeight::Create(View(DType::kF16, {n, k}, wh.data(), n * k * 2), ComputeType::kBF16);
    ASSERT_TRUE(lw32.ok() && lw16.ok() && lwh.ok());
    for (int64_t m = 1; m <= 17; ++m) {
      const std::string what = absl::StrCat("m=", m, " n=", n, " k=", k);
      auto x = RandomVec(rng, m * k);
      std::vector<float> y(static_cast<size_t>(m * n));
      Linear(x.data(), m, *lw32, b.data(), y.data());
      ExpectClose(x, m, wf, n, k, b.data(), y, 1e-5, absl::StrCat(what, " f32 Linear"));
      for (internal::GemvWeight wt : kGemvWeights) {
        const void* wp = wt == internal::GemvWeight::kF32    ? static_cast<const void*>(wf.data())
                         : wt == internal::GemvWeight::kBF16 ? static_cast<const void*>(wb.data())
                                                             : static_cast<const void*>(wh.data());
        for (bool avx512 : {true, false}) {
          std::fill(y.begin(), y.end(), NAN);
          internal::SmallBatchLinear(x.data(), m, wp, wt, n, k, b.data(), y.data(), avx512);
          ExpectClose(x, m,
                      wt == internal::GemvWeight::kF32    ? wf
                      : wt == internal::GemvWeight::kBF16 ? w_rounded
                                                          : wh_rounded,
                      n, k, b.data(), y, 1e-5,
                      absl::StrCat(what, " ", GemvWeightName(wt), " small-batch kernel",
                                   avx512 ? "" : " (portable)"));
        }
      }
      if (lw16->compute_type() == ComputeType::kBF16) {
        Linear(x.data(), m, *lw16, b.data(), y.data());
        ExpectClose(x, m, w_rounded, n, k, b.data(), y, 1e-2, absl::StrCat(what, " bf16 Linear"));
      } else if (lw16->storage() == WeightStorage::kBF16) {
        Linear(x.data(), m, *lw16, b.data(), y.data());
        ExpectClose(x, m, w_rounded, n, k, b.data(), y, 1e-5,
                    absl::StrCat(what, " bf16 widened Linear"));
      }
      std::fill(y.begin(), y.end(), NAN);
      Linear(x.data(), m, *lwh, b.data(), y.data());
      ExpectClose(x, m, wh_rounded, n, k, b.data(), y, 1e-5, absl::StrCat(what, " f16 Linear"));
    }
  }
}

// The f32 GEMM on widened panels, on any CPU: one panel (bias in the GEMM),
// several with a partial last one (bias added after), and panels of a
// single row, at batch sizes on both sides of the small-batch kernel's.
TEST(LinearTest, WidenedPanelsMatchReference) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{37, 70}, {64, 256}, {5, 1}}) {
    const TestWeight w = RandomWeight(rng, n, k);
    const auto b = RandomVec(rng, n);
    for (int64_t m : {1, 9, 49, 70}) {
      const auto x = RandomVec(rng, m * k);
      for (internal::GemvWeight wt : {internal::GemvWeight::kBF16, internal::GemvWeight::kF16}) {
        for (int64_t panel : {0, 7, 1}) {
          for (bool with_bias : {false, true}) {
            const float* bias = with_bias ? b.data() : nullptr;
            std::vector<float> y(static_cast<size_t>(m * n), NAN);
            internal::WidenedLinear(x.data(), m, static_cast<const uint16_t*>(w.Data(wt)), wt, n,
                                    k, bias, y.data(), panel);
            ExpectClose(x, m, w.Values(wt), n, k, bias, y, 1e-5,
                        absl::StrCat(GemvWeightName(wt), " m=", m, " n=", n, " k=", k,
                                     " panel rows ", panel, with_bias ? " bias" : ""));
          }
        }
      }
    }
  }
}

// Shapes for the small-batch kernels: n below, at and past the row groups
// (4, 8, 16, 32 rows), k odd, below one 32-element step, and across several
// 512-element blocks with a tail; big enough to run on several threads.
// k = 96 and 1024 are whole numbers of AMX tile blocks (amx_linear.h).
constexpr std::pair<int64_t, int64_t> kKernelShapes[] = {
    {1, 1},    {5, 3},      {16, 31},   {17, 32},  {37, 70},
    {33, 513}, {300, 1030}, {70, 2049}, {40, 96}, {300, 1024}};

// The small-batch kernels against the reference for every m up to twice the
// switch to oneDNN (the kernels take any m), with and without bias, on the
// AVX-512 and the portable paths.
TEST(LinearTest, SmallBatchKernelsMatchReference) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const int64_t max_m = 2 * std::max(internal::SmallBatchMaxRows(ComputeType::kBF16),
                                     internal::SmallBatchMaxRows(ComputeType::kF32));
  for (const auto& [n, k] : kKernelShapes) {
    const TestWeight w = RandomWeight(rng, n, k);
    const auto b = RandomVec(rng, n);
    for (int64_t m = 1; m <= max_m; ++m) {
      const auto x = RandomVec(rng, m * k);
      std::vector<float> y(static_cast<size_t>(m * n));
      for (internal::GemvWeight wt : kGemvWeights) {
        for (const float* bias : {static_cast<const float*>(nullptr), b.data()}) {
          const Reference ref(x, m, w.Values(wt), n, k, bias);
          for (bool avx512 : {true, false}) {
            std::fill(y.begin(), y.end(), NAN);
            internal::SmallBatchLinear(x.data(), m, w.Data(wt), wt, n, k, bias, y.data(), avx512);
            ref.Expect(y, 1e-5,
                       absl::StrCat("m=", m, " n=", n, " k=", k, " ", GemvWeightName(wt),
                                    avx512 ? "" : " portable", bias ? " bias" : ""));
          }
        }
      }
    }
  }
}

// The AVX512-BF16 dot-product kernel against the reference on the
// activations rounded to bf16, for batches around its 6-row tile and up to
// past the 32 rows Linear sends it, with and without bias. Runs wherever the CPU has AVX512-BF16, also
// where Linear does not choose the kernel.
TEST(LinearTest, Bf16DotKernelMatchesReference) {
  if (!internal::Bf16DotKernelRuns()) GTEST_SKIP() << "no AVX512-BF16 here (or TANDEM_CPU_ISA)";
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (const auto& [n, k] : kKernelShapes) {
    const TestWeight w = RandomWeight(rng, n, k);
    const auto b = RandomVec(rng, n);
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{6}, int64_t{7}, int64_t{13},
                      int64_t{16}, int64_t{31}, int64_t{32}, int64_t{33}}) {
      for (bool with_bias : {false, true}) {
        const std::string what =
            absl::StrCat("dot kernel m=", m, " n=", n, " k=", k, with_bias ? " bias" : "");
        const auto x = RandomVec(rng, m * k);
        std::vector<float> x_rounded = x;
        for (auto& v : x_rounded) v = Bf16ToF32(F32ToBf16(v));
        std::vector<float> y(static_cast<size_t>(m * n), NAN);
        const float* bias = with_bias ? b.data() : nullptr;
        internal::Bf16DotLinear(x.data(), m, w.bf16.data(), n, k, bias, y.data());
        ExpectClose(x_rounded, m, w.f32, n, k, bias, y, 1e-5, what);
      }
    }
  }
}

// Batch invariance: a row of x gives the same bits at any position of any
// batch of a size class, whatever the other rows hold, through Linear as
// the engine calls it (classes as linear.h lists them) and through both
// small-batch kernel paths and the dot-product kernel (any size).
TEST(LinearTest, RowResultDoesNotDependOnBatch) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (const auto& [n, k] : kKernelShapes) {
    const TestWeight w = RandomWeight(rng, n, k);
    const auto b = RandomVec(rng, n);
    auto lw32 =
        LinearWeight::Create(View(DType::kF32, {n, k}, w.f32.data(), n * k * 4), ComputeType::kF32);
    auto lw16 = LinearWeight::Create(View(DType::kBF16, {n, k}, w.bf16.data(), n * k * 2),
                                     ComputeType::kBF16);
    auto lwh = LinearWeight::Create(View(DType::kF16, {n, k}, w.f16.data(), n * k * 2),
                                    ComputeType::kBF16);
    auto lwp = LinearWeight::Create(View(DType::kBF16, {n, k}, w.bf16.data(), n * k * 2),
                                    ComputeType::kBF16, WeightLayout::kCpuPacked);
    ASSERT_TRUE(lw32.ok() && lw16.ok() && lwh.ok() && lwp.ok());
    // One way of computing a batch, and the batch sizes [lo, hi] it gives a
    // row the same result for.
    struct Path {
      std::string name;
      int64_t lo, hi;
      std::function<void(const float*, int64_t, float*)> run;
    };
    std::vector<Path> paths;
    for (internal::GemvWeight wt : kGemvWeights) {
      const void* wp = w.Data(wt);
      for (bool avx512 : {true, false}) {
        paths.push_back(
            {absl::StrCat(GemvWeightName(wt), " kernel", avx512 ? "" : " portable"), 1, 16,
             [=, &b](const float* x, int64_t m, float* y) {
               internal::SmallBatchLinear(x, m, wp, wt, n, k, b.data(), y, avx512);
             }});
      }
    }
    if (internal::Bf16DotKernelRuns()) {
      paths.push_back({"bf16 dot kernel", 1, internal::kBf16DotMaxRows + 3,
                       [&w, &b, n, k](const float* x, int64_t m, float* y) {
                         internal::Bf16DotLinear(x, m, w.bf16.data(), n, k, b.data(), y);
                       }});
    }
    if (lwp->storage() == WeightStorage::kBF16Packed) {
      // Two classes: decode batches on the packed kernel (bf16_packed.h),
      // larger ones on oneDNN's GEMM, rounded up past kPackedExactRows;
      // even batches on one thread, odd ones on all of them.
      const auto run = [&lwp, &b](const float* x, int64_t m, float* y) {
        const int all = omp_get_max_threads();
        if (m % 2 == 0) omp_set_num_threads(1);
        Linear(x, m, *lwp, b.data(), y);
        omp_set_num_threads(all);
      };
      paths.push_back(
          {"Linear packed bf16, packed kernel", 1, internal::kPackedBf16KernelMaxRows, run});
      paths.push_back({"Linear packed bf16, oneDNN", internal::kPackedBf16KernelMaxRows + 1,
                       3 * internal::kPackedExactRows + 8, run});
    }
    for (const LinearWeight* lw : {&*lw32, &*lw16, &*lwh}) {
      const ComputeType t = lw->compute_type();
      const int64_t small = internal::SmallBatchMaxRows(t);
      std::vector<std::pair<int64_t, int64_t>> classes = {{1, small}};
      if (t == ComputeType::kF32 && (lw->storage() == WeightStorage::kBF16 ||
                                     lw->storage() == WeightStorage::kF16)) {
        // Widened bf16 (no bf16 GEMMs) or f16: the small-batch kernel.
        classes = {{1, internal::WidenedSmallBatchMaxRows()}};
      } else if (t == ComputeType::kBF16 && internal::Bf16UsesAmxKernel(2, k)) {
        // One row alone on the small-batch kernel, 2-32 on the AMX kernel.
        classes = {{1, 1}, {2, internal::kAmxMaxRows}};
      } else if (t == ComputeType::kBF16 && internal::Bf16UsesDotKernel(2)) {
        // One row alone on the small-batch kernel, 2-32 on the dot kernel.
        classes = {{1, 1}, {2, internal::kBf16DotMaxRows}};
      } else if (t == ComputeType::kBF16 && internal::OnednnBf16UsesAmx()) {
        for (int64_t hi = 16; hi <= internal::kWeightAsSrcMaxRows; hi += 16) {
          classes.push_back({std::max(small + 1, hi - 15), hi});
        }
      }
      for (const auto& [lo, hi] : classes) {
        paths.push_back(
            {absl::StrCat("Linear ", t == ComputeType::kBF16 ? "bf16" : "f32",
                          lw->storage() == WeightStorage::kBF16  ? " (bf16 storage)"
                          : lw->storage() == WeightStorage::kF16 ? " (f16 storage)"
                                                                 : " (f32 storage)"),
             lo, hi,
             [lw, &b](const float* x, int64_t m, float* y) { Linear(x, m, *lw, b.data(), y); }});
      }
    }
    for (const Path& p : paths) {
      // The row first in a batch of the smallest size, then anywhere in
      // batches of every size of the class, the other rows at another scale.
      const auto row = RandomVec(rng, k);
      std::vector<float> first;
      for (int64_t m = p.lo; m <= p.hi; ++m) {
        const int64_t at =
            first.empty() ? 0 : std::uniform_int_distribution<int64_t>(0, m - 1)(rng);
        auto x = RandomVec(rng, m * k, 3.0f);
        std::copy(row.begin(), row.end(), x.begin() + at * k);
        std::vector<float> y(static_cast<size_t>(m * n));
        p.run(x.data(), m, y.data());
        if (first.empty()) {
          first.assign(y.begin(), y.begin() + n);
          continue;
        }
        ASSERT_EQ(std::memcmp(y.data() + at * n, first.data(), sizeof(float) * n), 0)
            << p.name << ": row " << at << " of " << m << " differs from row 0 of " << p.lo
            << ", n=" << n << " k=" << k;
      }
    }
  }
}

TEST(LinearTest, OnednnRowsRoundsUpALittle) {
  for (int64_t m = 1; m <= 5000; ++m) {
    const int64_t r = internal::OnednnRows(m);
    ASSERT_GE(r, m);
    ASSERT_EQ(r % 16, 0) << m;
    ASSERT_LT(r, m + std::max<int64_t>(16, m / 8)) << m;
    ASSERT_EQ(internal::OnednnRows(r), r) << m;
  }
  // A few primitives per octave.
  std::vector<int64_t> sizes;
  for (int64_t m = 1025; m <= 2048; ++m) sizes.push_back(internal::OnednnRows(m));
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  EXPECT_EQ(sizes.size(), 8u);
}

TEST(LinearTest, CreateRejectsBadViews) {
  std::vector<float> w(64, 0.0f);
  auto bad = [&](const TensorView& v) {
    auto lw = LinearWeight::Create(v, ComputeType::kF32);
    EXPECT_FALSE(lw.ok());
    if (!lw.ok()) {
      EXPECT_EQ(lw.status().code(), absl::StatusCode::kInvalidArgument) << lw.status();
    }
  };
  bad(View(DType::kF32, {64}, w.data(), 256));
  bad(View(DType::kF32, {2, 4, 8}, w.data(), 256));
  bad(View(DType::kF32, {0, 8}, w.data(), 0));
  bad(View(DType::kI32, {8, 8}, w.data(), 256));
  bad(View(DType::kQ8_0, {2, 16}, w.data(), 68));  // rows are half a block
  bad(View(DType::kF32, {8, 8}, w.data(), 128));   // too few bytes
  bad(View(DType::kF32, {8, 8}, nullptr, 256));
}

TEST(LinearTest, EmptyBatchIsANoOp) {
  std::vector<float> w(8 * 4, 1.0f);
  auto lw = LinearWeight::Create(View(DType::kF32, {8, 4}, w.data(), 128), ComputeType::kF32);
  ASSERT_TRUE(lw.ok());
  float y = 42.0f;
  Linear(nullptr, 0, *lw, nullptr, &y);
  EXPECT_EQ(y, 42.0f);
}

TEST(LinearTest, PrimitiveCacheIsBounded) {
  std::vector<float> w(8 * 16, 0.5f);
  auto lw = LinearWeight::Create(View(DType::kF32, {8, 16}, w.data(), 512), ComputeType::kF32);
  ASSERT_TRUE(lw.ok());
  std::vector<float> x(300 * 16, 1.0f), y(300 * 8);
  for (int64_t m = 1; m <= 300; ++m) {
    Linear(x.data(), m, *lw, nullptr, y.data());
    ASSERT_LE(internal::OnednnMatmulCacheSize(), internal::kOnednnMatmulCacheLimit);
    ASSERT_EQ(y[static_cast<size_t>((m - 1) * 8 + 7)], 8.0f) << m;
  }
}

TEST(LinearTest, ConcurrentCallsFromThreads) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const int64_t n = 40, k = 72;
  auto w = RandomVec(rng, n * k);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = F32ToBf16(w[i]);
  auto lw32 =
      LinearWeight::Create(View(DType::kF32, {n, k}, w.data(), n * k * 4), ComputeType::kF32);
  auto lw16 =
      LinearWeight::Create(View(DType::kBF16, {n, k}, wb.data(), n * k * 2), ComputeType::kBF16);
  ASSERT_TRUE(lw32.ok() && lw16.ok());
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> xs, ys, expected;
  for (int t = 0; t < kThreads; ++t) {
    const int64_t m = 1 + 5 * t;
    xs.push_back(RandomVec(rng, m * k));
    ys.emplace_back(static_cast<size_t>(m * n));
    expected.emplace_back(static_cast<size_t>(m * n));
    Linear(xs[t].data(), m, t % 2 ? *lw16 : *lw32, nullptr, expected[t].data());
  }
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int64_t m = 1 + 5 * t;
      for (int rep = 0; rep < 50; ++rep) {
        Linear(xs[t].data(), m, t % 2 ? *lw16 : *lw32, nullptr, ys[t].data());
        // oneDNN may split K differently with another team size: compare
        // with a tolerance, not bitwise.
        for (size_t i = 0; i < ys[t].size(); ++i) {
          if (!(std::fabs(ys[t][i] - expected[t][i]) <=
                1e-4f * (1.0f + std::fabs(expected[t][i])))) {
            ++mismatches[t];
            break;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(CpuFeaturesTest, Bf16FollowsHardwareAndEnvironment) {
  const CpuFeatures& f = HostCpuFeatures();
  std::printf("host CPU features: %s\n", CpuFeaturesString(f).c_str());
  if (f.avx512_bf16) {
    EXPECT_TRUE(f.avx512f && f.os_avx512);
  }
  const char* env = std::getenv("TANDEM_CPU_ISA");
  const std::string saved = env != nullptr ? env : "";
  // Not capped by TANDEM_CPU_ISA: bf16 needs the AVX-512 VNNI level, since
  // TANDEM_CPU_ISA=avx512 stands for a Skylake-SP, which has neither.
  const bool wide = MaxKernelIsa() >= KernelIsa::kAvx512Vnni;
  EXPECT_EQ(CpuHasBf16(), f.avx512_bf16 && wide && saved != "f32");
  setenv("TANDEM_CPU_ISA", "f32", 1);
  EXPECT_FALSE(CpuHasBf16());
  std::vector<uint16_t> wb(4 * 8, 0);
  auto lw = LinearWeight::Create(View(DType::kBF16, {4, 8}, wb.data(), 64), ComputeType::kBF16);
  ASSERT_TRUE(lw.ok());
  EXPECT_EQ(lw->compute_type(), ComputeType::kF32);
  if (env != nullptr) {
    setenv("TANDEM_CPU_ISA", saved.c_str(), 1);
  } else {
    unsetenv("TANDEM_CPU_ISA");
  }
  EXPECT_EQ(CpuHasBf16(), f.avx512_bf16 && wide && saved != "f32");
}

// The GEMV kernels' prefetch level: TANDEM_PREFETCH when it names one, else
// L2 on AMD and L1 elsewhere. (ctest runs the kernel tests again with each
// value forced, so both instantiations of the kernels run on every host.)
TEST(StreamPrefetchTest, FollowsVendorAndEnvironment) {
  const char* env = std::getenv("TANDEM_PREFETCH");
  const std::string v = env != nullptr ? env : "";
  PrefetchLevel want = HostCpuFeatures().amd ? PrefetchLevel::kL2 : PrefetchLevel::kL1;
  if (v == "l1") want = PrefetchLevel::kL1;
  if (v == "l2") want = PrefetchLevel::kL2;
  EXPECT_EQ(StreamPrefetchLevel(), want) << "TANDEM_PREFETCH=" << v;
  EXPECT_STREQ(PrefetchLevelName(PrefetchLevel::kL1), "l1");
  EXPECT_STREQ(PrefetchLevelName(PrefetchLevel::kL2), "l2");
}

// The packed quantized kernel's level: the GEMV kernels' everywhere but on
// AMD family 0x1A (Zen 5) and later, which take L1 unless the environment
// says L2.
TEST(StreamPrefetchTest, PackedLevelFollowsFamilyAndEnvironment) {
  constexpr auto kL1 = PrefetchLevel::kL1;
  constexpr auto kL2 = PrefetchLevel::kL2;
  EXPECT_EQ(ChoosePackedPrefetchLevel(nullptr, false, 6), kL1);    // Intel
  EXPECT_EQ(ChoosePackedPrefetchLevel(nullptr, true, 0x19), kL2);  // Zen 4
  EXPECT_EQ(ChoosePackedPrefetchLevel(nullptr, true, 0x1a), kL1);  // Zen 5
  EXPECT_EQ(ChoosePackedPrefetchLevel("l2", true, 0x1a), kL2);
  EXPECT_EQ(ChoosePackedPrefetchLevel("l1", true, 0x19), kL1);
  EXPECT_EQ(ChoosePackedPrefetchLevel("l2", false, 6), kL2);
  EXPECT_EQ(ChoosePackedPrefetchLevel("other", true, 0x19), kL2);  // ignored
  EXPECT_EQ(ChooseStreamPrefetchLevel(nullptr, true), kL2);
  EXPECT_EQ(ChooseStreamPrefetchLevel(nullptr, false), kL1);
  EXPECT_EQ(ChooseStreamPrefetchLevel("l1", true), kL1);
  const CpuFeatures& f = HostCpuFeatures();
  EXPECT_EQ(PackedPrefetchLevel(),
            ChoosePackedPrefetchLevel(std::getenv("TANDEM_PREFETCH"), f.amd, f.family));
  EXPECT_GT(f.family, 0) << "cpuid leaf 1 gives every x86-64 CPU a family";
}

// The 16-bit kernels' direct path (1-4 rows of x, the one whose prefetch
// level is chosen at run time) against the reference, with and without bias.
TEST(StreamPrefetchTest, DirectBf16KernelMatchesReference) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed, " prefetch ", PrefetchLevelName(StreamPrefetchLevel())));
  std::mt19937 rng(seed);
  for (const auto& [n, k] : kKernelShapes) {
    const TestWeight w = RandomWeight(rng, n, k);
    const auto b = RandomVec(rng, n);
    for (int64_t m = 1; m <= 4; ++m) {
      const auto x = RandomVec(rng, m * k);
      std::vector<float> y(static_cast<size_t>(m * n));
      for (internal::GemvWeight wt : {internal::GemvWeight::kBF16, internal::GemvWeight::kF16}) {
        for (const float* bias : {static_cast<const float*>(nullptr), b.data()}) {
          std::fill(y.begin(), y.end(), NAN);
          internal::SmallBatchLinear(x.data(), m, w.Data(wt), wt, n, k, bias, y.data());
          ExpectClose(x, m, w.Values(wt), n, k, bias, y, 1e-5,
                      absl::StrCat(GemvWeightName(wt), " m=", m, " n=", n, " k=", k,
                                   bias ? " bias" : ""));
        }
      }
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace tandem
