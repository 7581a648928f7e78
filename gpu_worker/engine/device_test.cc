// Every op of the engine's device interface against a plain reference, on
// fresh random inputs (the seed is printed on failure), on every device
// present (testing/test_devices.h): the host device always, each GPU where
// built with CUDA and visible. One parametrized test over the ops.
#include "gpu_worker/engine/device.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/ops/rope.h"
#include "cpu_worker/ops/router.h"
#include "cpu_worker/ops/sampling.h"
#include "gpu_worker/engine/model_weights.h"
#include "gpu_worker/engine/testing/engine_test_util.h"
#include "gpu_worker/engine/testing/test_devices.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::MaxRelativeError;

constexpr int64_t kVocab = 50, kHidden = 64, kQ = 96, kKv = 32, kFfn = 128, kExperts = 4;

// A weight matrix as the test holds it: the values (bf16-rounded where
// stored as bf16) and the bytes a TensorView points at.
struct Matrix {
  std::vector<float> values;  // [n, k]
  std::vector<uint16_t> bf16;
  int64_t n = 0, k = 0;
  DType dtype = DType::kF32;
  TensorView View() const {
    TensorView t;
    t.dtype = dtype;
    t.shape = {n, k};
    t.data = dtype == DType::kF32 ? static_cast<const void*>(values.data())
                                  : bf16.data();
    t.nbytes = n * k * (dtype == DType::kF32 ? 4 : 2);
    return t;
  }
};

class DeviceOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    embd_ = RandomMatrix(kVocab, kHidden, DType::kF32);
    lm_ = RandomMatrix(kVocab, kHidden, DType::kF32);
    q_ = RandomMatrix(kQ, kHidden, DType::kBF16);
    k_ = RandomMatrix(kKv, kHidden, DType::kF32);
    gate_ = RandomMatrix(kFfn, kHidden, DType::kBF16);
    up_ = RandomMatrix(kFfn, kHidden, DType::kBF16);
    down_ = RandomMatrix(kHidden, kFfn, DType::kBF16);
    w_.token_embd = embd_.View();
    w_.output_norm = Random(kHidden);
    w_.lm_head =
        ops::LinearWeight::Create(lm_.View(), ops::ComputeType::kF32).value();
    LayerWeights l;
    l.attn_norm = Random(kHidden);
    l.q = ops::LinearWeight::Create(q_.View(), ops::ComputeType::kBF16).value();
    l.q_bias = Random(kQ);
    l.k = ops::LinearWeight::Create(k_.View(), ops::ComputeType::kF32).value();
    l.v = l.k;
    l.o = l.k;
    l.mlp.gate =
        ops::LinearWeight::Create(gate_.View(), ops::ComputeType::kBF16)
            .value();
    l.mlp.up =
        ops::LinearWeight::Create(up_.View(), ops::ComputeType::kBF16).value();
    l.mlp.down =
        ops::LinearWeight::Create(down_.View(), ops::ComputeType::kBF16)
            .value();
    l.shared_gate = Random(kHidden);
    w_.layers.push_back(std::move(l));
    // A MoE layer for RunExperts: three bf16 experts and an f32 one.
    LayerWeights moe;
    moe.moe = true;
    router_ = RandomMatrix(kExperts, kHidden, DType::kF32);
    moe.router =
        ops::LinearWeight::Create(router_.View(), ops::ComputeType::kF32).value();
    for (int64_t e = 0; e < kExperts; ++e) {
      const DType t = e + 1 == kExperts ? DType::kF32 : DType::kBF16;
      const ops::ComputeType c =
          t == DType::kF32 ? ops::ComputeType::kF32 : ops::ComputeType::kBF16;
      expert_mats_.push_back({RandomMatrix(kFfn, kHidden, t),
                              RandomMatrix(kFfn, kHidden, t),
                              RandomMatrix(kHidden, kFfn, t)});
      const auto& m = expert_mats_.back();
      ops::MlpWeights w;
      w.gate = ops::LinearWeight::Create(m[0].View(), c).value();
      w.up = ops::LinearWeight::Create(m[1].View(), c).value();
      w.down = ops::LinearWeight::Create(m[2].View(), c).value();
      moe.experts.push_back(std::move(w));
    }
    w_.layers.push_back(std::move(moe));
    inv_freq_ = ops::RopeInvFreq(16, 10000.0f, {});
  }

  std::vector<float> Random(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng_);
    return v;
  }
  Matrix RandomMatrix(int64_t n, int64_t k, DType dtype) {
    Matrix m;
    m.n = n;
    m.k = k;
    m.dtype = dtype;
    m.values = Random(n * k, 1.0f / std::sqrt(static_cast<float>(k)));
    if (dtype == DType::kBF16) {
      for (float& x : m.values) {
        m.bf16.push_back(F32ToBf16(x));
        x = Bf16ToF32(m.bf16.back());
      }
    }
    return m;
  }

  // Device memory holding `v`.
  float* Put(Device& d, const std::vector<float>& v) {
    auto m = d.Allocate(std::max<size_t>(v.size(), 1) * sizeof(float));
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return nullptr;
    float* p = static_cast<float*>((*m)->data());
    EXPECT_TRUE(d.CopyToDevice(v.data(), v.size() * sizeof(float), p).ok());
    held_.push_back(std::move(*m));
    return p;
  }
  std::vector<float> Get(Device& d, const float* p, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_TRUE(d.CopyToHost(p, v.size() * sizeof(float), v.data()).ok());
    return v;
  }

  // Runs the op of GetParam() on `d` and checks it.
  void Check(Device& d);

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  Matrix embd_, lm_, q_, k_, gate_, up_, down_, router_;
  std::vector<std::array<Matrix, 3>> expert_mats_;  // [expert] gate, up, down
  ModelWeights w_;
  std::vector<float> inv_freq_;
  std::vector<DeviceMemory> held_;
};

std::vector<float> RefLinear(const std::vector<float>& x, int64_t rows,
                             const Matrix& m, const std::vector<float>* bias) {
  std::vector<float> y(static_cast<size_t>(rows * m.n));
  ops::ReferenceLinear(x.data(), rows, m.values.data(), m.n, m.k,
                       bias == nullptr ? nullptr : bias->data(), y.data());
  return y;
}

// down(silu(gate(x)) * up(x)) in f32 from the weights' values.
std::vector<float> RefMlp(const std::vector<float>& x, int64_t rows,
                          const Matrix& gate, const Matrix& up,
                          const Matrix& down) {
  std::vector<float> g = RefLinear(x, rows, gate, nullptr),
                     u = RefLinear(x, rows, up, nullptr);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  return RefLinear(g, rows, down, nullptr);
}

void DeviceOps::Check(Device& d) {
  ASSERT_TRUE(d.Prepare(w_, inv_freq_, {}).ok());
  EXPECT_EQ(d.Prepare(w_, inv_freq_, {}).code(),
            absl::StatusCode::kFailedPrecondition);
  const LayerWeights& l = w_.layers[0];
  const std::string op = GetParam();
  const int64_t rows = 7;
  if (op == "Embedding") {
    std::vector<int32_t> ids = {3, 0, 49, 17, 3};
    float* out = Put(d, std::vector<float>(ids.size() * kHidden));
    ASSERT_TRUE(d.Embedding(w_.token_embd, ids.data(), 5, out).ok());
    std::vector<float> ref;
    for (int32_t id : ids) {
      ref.insert(ref.end(), embd_.values.begin() + id * kHidden,
                 embd_.values.begin() + (id + 1) * kHidden);
    }
    EXPECT_EQ(Get(d, out, 5 * kHidden), ref);
  } else if (op == "RmsNorm") {
    const std::vector<float> x = Random(rows * kHidden, 3.0f);
    float* dx = Put(d, x);
    ASSERT_TRUE(d.RmsNorm(dx, rows, kHidden, l.attn_norm.data(), 1e-5f, dx)
                    .ok());  // in place
    std::vector<float> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < kHidden; ++i)
        ss += double{x[r * kHidden + i]} * x[r * kHidden + i];
      const double inv = 1.0 / std::sqrt(ss / kHidden + 1e-5);
      for (int64_t i = 0; i < kHidden; ++i) {
        ref[r * kHidden + i] =
            static_cast<float>(x[r * kHidden + i] * inv * l.attn_norm[i]);
      }
    }
    EXPECT_LT(MaxRelativeError(Get(d, dx, rows * kHidden), ref), 1e-5);
  } else if (op == "ShardedRmsNorm") {
    // This rank's half of rows of 2 * kHidden: its squares, then the norm
    // with the other half's squares added in (here: 1.5 times its own).
    const std::vector<float> x = Random(rows * kHidden, 3.0f);
    float* dx = Put(d, x);
    float* ss = Put(d, std::vector<float>(rows));
    ASSERT_TRUE(d.RowSumSquares(dx, rows, kHidden, ss).ok());
    std::vector<float> want_ss(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < kHidden; ++i)
        sum += double{x[r * kHidden + i]} * x[r * kHidden + i];
      want_ss[static_cast<size_t>(r)] = static_cast<float>(sum);
    }
    std::vector<float> got_ss = Get(d, ss, rows);
    EXPECT_LT(MaxRelativeError(got_ss, want_ss), 1e-6);
    for (float& v : got_ss) v *= 2.5f;
    float* total = Put(d, got_ss);
    ASSERT_TRUE(d.ScaleRms(dx, rows, kHidden, total, 2 * kHidden, 1e-5f,
                           l.attn_norm.data())
                    .ok());
    std::vector<float> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const double inv =
          1.0 / std::sqrt(2.5 * want_ss[static_cast<size_t>(r)] /
                              (2 * kHidden) +
                          1e-5);
      for (int64_t i = 0; i < kHidden; ++i) {
        ref[r * kHidden + i] =
            static_cast<float>(x[r * kHidden + i] * inv * l.attn_norm[i]);
      }
    }
    EXPECT_LT(MaxRelativeError(Get(d, dx, rows * kHidden), ref), 1e-5);
  } else if (op == "AddScaledZeroAndBias") {
    const std::vector<float> x = Random(1000), y = Random(1000);
    float* dx = Put(d, x);
    float* dy = Put(d, y);
    ASSERT_TRUE(d.AddScaled(dx, -0.375f, 1000, dy).ok());
    std::vector<float> ref(y);
    for (size_t i = 0; i < ref.size(); ++i)
      ref[i] = std::fma(-0.375f, x[i], y[i]);
    const std::vector<float> sum = Get(d, dy, 1000);
    EXPECT_LT(MaxRelativeError(sum, ref), 1e-6);
    ASSERT_TRUE(d.Zero(dy, 999).ok());
    const std::vector<float> z = Get(d, dy, 1000);
    EXPECT_EQ(std::count(z.begin(), z.end(), 0.0f), 999);
    // Zero left the last element as it was, bit for bit (against the
    // reference it may differ by its rounding: the relative bound above).
    EXPECT_EQ(z[999], sum[999]);
    // Bias rows: y[r] += q_bias for 3 rows.
    const std::vector<float> rows3 = Random(3 * kQ);
    float* dr = Put(d, rows3);
    ASSERT_TRUE(d.AddBias(l.q_bias.data(), 3, kQ, dr).ok());
    std::vector<float> want(rows3);
    for (size_t i = 0; i < want.size(); ++i) want[i] += l.q_bias[i % kQ];
    EXPECT_LT(MaxRelativeError(Get(d, dr, 3 * kQ), want), 1e-6);
  } else if (op == "Linear") {
    for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{19}}) {
      const std::vector<float> x = Random(m * kHidden);
      float* dx = Put(d, x);
      float* y = Put(d, std::vector<float>(m * kQ));
      ASSERT_TRUE(d.Linear(dx, m, l.q, l.q_bias.data(), y).ok());
      // bf16 weights: activations may be rounded to bf16 too.
      EXPECT_LT(
          MaxRelativeError(Get(d, y, m * kQ), RefLinear(x, m, q_, &l.q_bias)),
          1e-2)
          << m << " rows";
      float* y2 = Put(d, std::vector<float>(m * kKv));
      ASSERT_TRUE(d.Linear(dx, m, l.k, nullptr, y2).ok());
      EXPECT_LT(
          MaxRelativeError(Get(d, y2, m * kKv), RefLinear(x, m, k_, nullptr)),
          1e-5)
          << m << " rows";
    }
    // A weight a copying device (a GPU) was not given is an error, not a
    // crash; the host device computes any weight in place.
    ops::LinearWeight stranger =
        ops::LinearWeight::Create(k_.View(), ops::ComputeType::kF32).value();
    float* dx = Put(d, Random(kHidden));
    float* y = Put(d, std::vector<float>(kKv));
    if (d.name().rfind("cuda", 0) == 0)
      EXPECT_FALSE(d.Linear(dx, 1, stranger, nullptr, y).ok());
  } else if (op == "Mlp") {
    const std::vector<float> x = Random(rows * kHidden);
    float* dx = Put(d, x);
    float* out = Put(d, std::vector<float>(rows * kHidden));
    ASSERT_TRUE(d.Mlp(l.mlp, dx, rows, out).ok());
    std::vector<float> g = RefLinear(x, rows, gate_, nullptr),
                       u = RefLinear(x, rows, up_, nullptr);
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    EXPECT_LT(MaxRelativeError(Get(d, out, rows * kHidden),
                               RefLinear(g, rows, down_, nullptr)),
              2e-2);
  } else if (op == "RunExperts") {
    // Rows shared between runs (a token's experts), an empty run, an
    // expert in two runs; then runs whose weights differ in type.
    const LayerWeights& m = w_.layers[1];
    const std::vector<float> x = Random(rows * kHidden),
                             o = Random(rows * kHidden);
    const std::vector<std::vector<int64_t>> picks = {
        {0, 2, 5}, {}, {2, 3, 6, 0}, {1}, {4, 2}};
    const std::vector<int> experts_of = {0, 1, 2, 1, 3};
    std::vector<std::vector<float>> scales;
    for (const auto& p : picks) {
      scales.push_back(Random(static_cast<int64_t>(p.size()), 0.5f));
    }
    const std::vector<std::vector<size_t>> calls = {{0, 1, 2, 3}, {0, 4}};
    float* dx = Put(d, x);
    for (size_t c = 0; c < calls.size(); ++c) {
      float* dout = Put(d, o);
      std::vector<ExpertRun> runs;
      std::vector<float> want(o);
      for (size_t r : calls[c]) {
        const auto& mats = expert_mats_[static_cast<size_t>(experts_of[r])];
        const int64_t n = static_cast<int64_t>(picks[r].size());
        runs.push_back({&m.experts[static_cast<size_t>(experts_of[r])],
                        picks[r].data(), scales[r].data(), n});
        std::vector<float> in;
        for (int64_t t : picks[r]) {
          in.insert(in.end(), x.begin() + t * kHidden,
                    x.begin() + (t + 1) * kHidden);
        }
        const std::vector<float> y = RefMlp(in, n, mats[0], mats[1], mats[2]);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < kHidden; ++j) {
            float& acc = want[static_cast<size_t>(picks[r][i] * kHidden + j)];
            acc = std::fma(scales[r][i], y[i * kHidden + j], acc);
          }
        }
      }
      ASSERT_TRUE(d.RunExperts(dx, kHidden, runs, dout).ok()) << "call " << c;
      EXPECT_LT(MaxRelativeError(Get(d, dout, rows * kHidden), want), 2e-2)
          << "call " << c;
    }
  } else if (op == "Rope") {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
      const int64_t heads = 3, head_dim = 16;
      const std::vector<float> x = Random(rows * heads * head_dim);
      std::vector<int64_t> pos = {0, 1, 5, 6, 100, 2047, 3};
      float* dx = Put(d, x);
      ASSERT_TRUE(d.Rope(dx, rows, heads, head_dim, pos.data(), style).ok());
      std::vector<float> ref(x);
      ops::ApplyRope(ref.data(), rows, heads, head_dim, pos.data(), inv_freq_,
                     style);
      EXPECT_LT(
          MaxRelativeError(Get(d, dx, static_cast<int64_t>(x.size())), ref),
          1e-5);
    }
  } else if (op == "Attend") {
    // Two sequences in blocks of 4, tables out of order: a prefill step, a
    // decode step, then a mixed one.
    const int64_t heads = 4, kv_heads = 2, hd = 16, bs = 4, blocks = 8;
    const int64_t qd = heads * hd, kvd = kv_heads * hd;
    auto kmem = d.Allocate(blocks * bs * kvd * 4);
    auto vmem = d.Allocate(blocks * bs * kvd * 4);
    ASSERT_TRUE(kmem.ok() && vmem.ok());
    ops::PagedKvLayer kv{static_cast<float*>((*kmem)->data()),
                         static_cast<float*>((*vmem)->data()), bs, kv_heads,
                         hd};
    const std::vector<std::vector<int32_t>> tables = {{5, 1, 6}, {2, 7, 0}};
    std::vector<std::vector<float>> ks(2),
        vs(2);  // each sequence's keys so far
    const float scale = 0.25f;
    // (sequence, start, n) per step.
    const std::vector<std::vector<std::array<int64_t, 3>>> steps = {
        {{0, 0, 6}, {1, 0, 3}}, {{0, 6, 1}, {1, 3, 1}}, {{1, 4, 1}, {0, 7, 3}}};
    for (size_t s = 0; s < steps.size(); ++s) {
      int64_t total = 0;
      std::vector<AttentionChunk> chunks;
      for (const auto& c : steps[s]) {
        chunks.push_back(
            {total, c[2], c[1], &tables[static_cast<size_t>(c[0])]});
        total += c[2];
      }
      const std::vector<float> q = Random(total * qd), k = Random(total * kvd),
                               v = Random(total * kvd);
      float* dq = Put(d, q);
      float* dk = Put(d, k);
      float* dv = Put(d, v);
      float* out = Put(d, std::vector<float>(total * qd));
      ASSERT_TRUE(d.Attend(kv, dq, dk, dv, heads, scale, chunks, out).ok());
      const std::vector<float> got = Get(d, out, total * qd);
      for (size_t i = 0; i < chunks.size(); ++i) {
        const AttentionChunk& c = chunks[i];
        auto& sk = ks[static_cast<size_t>(steps[s][i][0])];
        auto& sv = vs[static_cast<size_t>(steps[s][i][0])];
        sk.insert(sk.end(), k.begin() + c.row * kvd,
                  k.begin() + (c.row + c.n) * kvd);
        sv.insert(sv.end(), v.begin() + c.row * kvd,
                  v.begin() + (c.row + c.n) * kvd);
        std::vector<float> ref(static_cast<size_t>(c.n * qd));
        ops::ReferenceAttention(q.data() + c.row * qd, c.n, heads, sk.data(),
                                sv.data(), kv_heads, hd, c.start_pos, scale,
                                ref.data());
        std::vector<float> mine(got.begin() + c.row * qd,
                                got.begin() + (c.row + c.n) * qd);
        EXPECT_LT(MaxRelativeError(mine, ref), 1e-5)
            << "step " << s << " chunk " << i;
      }
    }
  } else if (op == "RouteTopK") {
    const int64_t experts = 10, k = 3;
    const std::vector<float> logits = Random(rows * experts);
    float* dl = Put(d, logits);
    for (bool renorm : {false, true}) {
      std::vector<int32_t> ids(rows * k), ref_ids(rows * k);
      std::vector<float> wts(rows * k), ref_w(rows * k);
      ASSERT_TRUE(
          d.RouteTopK(dl, rows, experts, k, renorm, ids.data(), wts.data())
              .ok());
      ops::RouteTopK(logits.data(), rows, experts, k, renorm, ref_ids.data(),
                     ref_w.data());
      EXPECT_EQ(ids, ref_ids);
      EXPECT_LT(MaxRelativeError(wts, ref_w), 1e-5);
    }
  } else if (op == "GreedyPick") {
    // Random rows, one with a tie between two maxima (the lower index wins)
    // and one whose first logit is a NaN (skipped on every device).
    const int64_t vocab = 300;
    std::vector<float> logits = Random(rows * vocab, 4.0f);
    logits[2 * vocab + 17] = logits[2 * vocab + 250] = 40.0f;
    logits[3 * vocab] = std::numeric_limits<float>::quiet_NaN();
    float* dl = Put(d, logits);
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    std::vector<float> lps(static_cast<size_t>(rows));
    ASSERT_TRUE(d.GreedyPick(dl, rows, vocab, ids.data(), lps.data()).ok());
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * vocab;
      EXPECT_EQ(ids[static_cast<size_t>(r)], ops::ArgMax(row, vocab)) << r;
      const float want = ops::LogProb(row, vocab, ops::ArgMax(row, vocab));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(lps[static_cast<size_t>(r)])) << r;  // a NaN row's log-prob
      } else {
        EXPECT_NEAR(lps[static_cast<size_t>(r)], want, 1e-6 * std::max(1.0f, std::fabs(want)))
            << r;
      }
    }
    EXPECT_EQ(ids[2], 17);
    EXPECT_NE(ids[3], 0);
  } else if (op == "GatherAndScatterRows") {
    const std::vector<float> x = Random(rows * kHidden);
    float* dx = Put(d, x);
    const std::vector<int64_t> pick = {6, 0, 3, 4};
    float* g = Put(d, std::vector<float>(pick.size() * kHidden));
    ASSERT_TRUE(d.GatherRows(dx, kHidden, pick.data(), 4, g).ok());
    std::vector<float> ref;
    for (int64_t r : pick) {
      ref.insert(ref.end(), x.begin() + r * kHidden,
                 x.begin() + (r + 1) * kHidden);
    }
    EXPECT_EQ(Get(d, g, 4 * kHidden), ref);
    const std::vector<float> scales = {0.5f, -2.0f, 0.125f, 1.0f};
    ASSERT_TRUE(
        d.ScatterAddRows(g, kHidden, pick.data(), scales.data(), 4, dx).ok());
    std::vector<float> want(x);
    for (size_t i = 0; i < pick.size(); ++i) {
      for (int64_t j = 0; j < kHidden; ++j) {
        float& o = want[pick[i] * kHidden + j];
        o = std::fma(scales[i], ref[i * kHidden + j], o);
      }
    }
    EXPECT_LT(MaxRelativeError(Get(d, dx, rows * kHidden), want), 1e-6);
  } else if (op == "SigmoidGateAdd") {
    const std::vector<float> x = Random(rows * kHidden),
                             h = Random(rows * kHidden),
                             o = Random(rows * kHidden);
    float* dx = Put(d, x);
    float* dh = Put(d, h);
    float* dout = Put(d, o);
    ASSERT_TRUE(
        d.SigmoidGateAdd(dx, dh, l.shared_gate.data(), rows, kHidden, dout)
            .ok());
    std::vector<float> ref(o);
    for (int64_t t = 0; t < rows; ++t) {
      double dot = 0;
      for (int64_t i = 0; i < kHidden; ++i)
        dot += double{h[t * kHidden + i]} * l.shared_gate[i];
      const double g = 1.0 / (1.0 + std::exp(-dot));
      for (int64_t i = 0; i < kHidden; ++i)
        ref[t * kHidden + i] += g * x[t * kHidden + i];
    }
    EXPECT_LT(MaxRelativeError(Get(d, dout, rows * kHidden), ref), 1e-5);
  } else {
    FAIL() << "no check for op " << op;
  }
}

TEST_P(DeviceOps, MatchesReference) {
  for (const testing::TestDevice& td : testing::TestDevicesNoting()) {
    SCOPED_TRACE(absl::StrCat(td.name, " seed ", seed_));
    auto d = td.make();
    ASSERT_TRUE(d.ok()) << d.status();
    held_.clear();
    Check(**d);
    held_.clear();
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, DeviceOps,
                         ::testing::Values("Embedding", "RmsNorm", "ShardedRmsNorm",
                                           "AddScaledZeroAndBias", "Linear", "RunExperts",
                                           "Mlp", "Rope", "Attend", "RouteTopK",
                                           "GatherAndScatterRows", "GreedyPick",
                                           "SigmoidGateAdd"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
