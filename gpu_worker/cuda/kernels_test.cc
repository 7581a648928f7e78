// Every CUDA kernel against the CPU reference on fresh random inputs: one
// parametrized test over the ops, run on every visible device and for each
// activation type. Skips itself, with the runtime's reason, where no GPU is
// visible. The seed is printed on failure.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/model_config.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/ops/elementwise.h"
#include "cpu_worker/ops/rope.h"
#include "cpu_worker/ops/router.h"
#include "cpu_worker/ops/sampling.h"
#include "cpu_worker/ops/linear.h"
#include "gpu_worker/cuda/cublas_gemm.h"
#include "gpu_worker/cuda/cuda_resources.h"
#include "gpu_worker/cuda/cuda_status.h"
#include "gpu_worker/cuda/device_info.h"
#include "gpu_worker/cuda/kernels/decode_attention.h"
#include "gpu_worker/cuda/kernels/elementwise.h"
#include "gpu_worker/cuda/kernels/moe_routing.h"
#include "gpu_worker/cuda/kernels/prefill_attention.h"
#include "gpu_worker/cuda/kernels/rms_norm.h"
#include "gpu_worker/cuda/kernels/sampling.h"
#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

// Device memory for a test, freed on scope exit.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) {
    if (cudaMalloc(&p_, std::max<size_t>(bytes, 4)) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBytes() { cudaFree(p_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  void* get() const { return p_; }
  bool ok() const { return p_ != nullptr; }

 private:
  void* p_ = nullptr;
};

template <typename T>
std::unique_ptr<DeviceBytes> Upload(const std::vector<T>& v) {
  auto d = std::make_unique<DeviceBytes>(v.size() * sizeof(T));
  if (d->ok() && !v.empty()) {
    EXPECT_EQ(cudaMemcpy(d->get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    // cudaMemcpy from pageable memory may return before the DMA lands, and
    // the kernels under test run on non-blocking streams that do not wait
    // for the legacy stream it used.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  return d;
}

template <typename T>
std::vector<T> Download(const DeviceBytes& d, size_t n) {
  std::vector<T> v(n);
  cudaDeviceSynchronize();
  if (n > 0) cudaMemcpy(v.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}

// Activations as the kernels see them: f32, or bf16 bits.
struct Acts {
  ActType type;
  std::vector<float> f32;      // the values (bf16-rounded when type is bf16)
  std::vector<uint16_t> bf16;  // their bits when type is bf16
  std::unique_ptr<DeviceBytes> Upload() const {
    return type == ActType::kF32 ? cuda::Upload(f32) : cuda::Upload(bf16);
  }
};

Acts RandomActs(std::mt19937& rng, size_t n, ActType type, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  Acts a{type, std::vector<float>(n), {}};
  for (float& x : a.f32) x = d(rng);
  if (type == ActType::kBF16) {
    a.bf16.resize(n);
    for (size_t i = 0; i < n; ++i) {
      a.bf16[i] = F32ToBf16(a.f32[i]);
      a.f32[i] = Bf16ToF32(a.bf16[i]);
    }
  }
  return a;
}

std::vector<float> DownloadActs(const DeviceBytes& d, size_t n, ActType type) {
  if (type == ActType::kF32) return Download<float>(d, n);
  std::vector<uint16_t> b = Download<uint16_t>(d, n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = Bf16ToF32(b[i]);
  return f;
}

// |got - want| <= tol * (1 + |want|) everywhere.
::testing::AssertionResult Near(const std::vector<float>& got, const std::vector<float>& want,
                                double tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol * (1 + std::fabs(want[i])))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs "
                                           << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// bf16 outputs are one rounding away from the f32 result.
double Tol(ActType t, double f32_tol) { return t == ActType::kBF16 ? 1e-2 : f32_tol; }

using OpCheck = std::function<void(std::mt19937&, ActType)>;

void CheckEmbedding(std::mt19937& rng, ActType t) {
  const int64_t vocab = 97, hidden = 300;
  const Acts table = RandomActs(rng, vocab * hidden, t);
  std::vector<int32_t> ids = {0, 96, 5, 5, 42, -1, 97};  // the last two out of range
  auto dt = table.Upload();
  auto di = Upload(ids);
  DeviceBytes out(ids.size() * hidden * 4);
  ASSERT_EQ(LaunchEmbedding(dt->get(), t, vocab, hidden, di->as<int32_t>(),
                            static_cast<int64_t>(ids.size()), out.get(), ActType::kF32,
                            nullptr),
            0);
  const std::vector<float> got = Download<float>(out, ids.size() * hidden);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      const bool valid = ids[r] >= 0 && ids[r] < vocab;
      ASSERT_EQ(got[r * hidden + i], valid ? table.f32[ids[r] * hidden + i] : 0.0f)
          << "row " << r << " i " << i;
    }
  }
}

void CheckRmsNorm(std::mt19937& rng, ActType t) {
  if (t != ActType::kF32) return;  // the f32-only launcher
  for (int64_t dim : {1, 64, 576, 4097}) {
    const int64_t rows = 7;
    const Acts x = RandomActs(rng, rows * dim, t), w = RandomActs(rng, dim, t);
    std::vector<float> want(rows * dim);
    ops::RmsNorm(x.f32.data(), rows, dim, w.f32.data(), 1e-5f, want.data());
    auto dx = Upload(x.f32);
    auto dw = Upload(w.f32);
    DeviceBytes out(rows * dim * 4);
    ASSERT_EQ(LaunchRmsNorm(dx->as<float>(), rows, dim, dw->as<float>(), 1e-5f,
                            out.as<float>(), nullptr),
              0);
    EXPECT_TRUE(Near(Download<float>(out, rows * dim), want, 1e-4)) << "dim " << dim;
  }
}

void CheckAddRmsNorm(std::mt19937& rng, ActType t) {
  for (int64_t dim : {64, 576, 4097}) {
    const int64_t rows = 5;
    const Acts res = RandomActs(rng, rows * dim, ActType::kF32);
    const Acts delta = RandomActs(rng, rows * dim, t);
    const Acts w = RandomActs(rng, dim, ActType::kF32);
    std::vector<float> sum = res.f32, want(rows * dim);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += delta.f32[i];
    ops::RmsNorm(sum.data(), rows, dim, w.f32.data(), 1e-6f, want.data());
    auto dr = Upload(res.f32);
    auto dd = delta.Upload();
    auto dw = Upload(w.f32);
    DeviceBytes out(rows * dim * 4);
    ASSERT_EQ(LaunchAddRmsNorm(dr->as<float>(), dd->get(), rows, dim, dw->as<float>(),
                               1e-6f, out.get(), t, nullptr),
              0);
    EXPECT_TRUE(Near(Download<float>(*dr, rows * dim), sum, 0)) << "residual, dim " << dim;
    EXPECT_TRUE(Near(DownloadActs(out, rows * dim, t), want, Tol(t, 1e-4))) << "dim " << dim;
  }
}

void CheckRope(std::mt19937& rng, ActType t) {
  for (bool interleaved : {false, true}) {
    const int64_t tokens = 6, heads = 3, head_dim = 64, rotary = 48;  // partial rotary too
    const std::vector<float> inv_freq = ops::RopeInvFreq(rotary, 10000.0f, RopeScaling{});
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    const Acts x = RandomActs(rng, tokens * heads * head_dim, t);
    std::vector<int64_t> pos = {0, 1, 7, 100, 4095, 30000};
    std::vector<float> want = x.f32;
    ops::ApplyRope(want.data(), tokens, heads, head_dim, pos.data(), inv_freq,
                   interleaved ? RopeStyle::kInterleaved : RopeStyle::kNeox);
    auto dx = x.Upload();
    auto dp = Upload(pos);
    auto df = Upload(inv_freq);
    ASSERT_EQ(LaunchRope(dx->get(), t, tokens, heads, head_dim, dp->as<int64_t>(),
                         df->as<float>(), half, interleaved, nullptr),
              0);
    // sincosf against std::sin/cos of the same f32 angle (up to ~3e4 rad).
    EXPECT_TRUE(Near(DownloadActs(*dx, x.f32.size(), t), want, Tol(t, 1e-5)))
        << (interleaved ? "interleaved" : "neox");
  }
}

void CheckSwiGlu(std::mt19937& rng, ActType t) {
  const int64_t n = 100003;
  const Acts g = RandomActs(rng, n, t, 4.0f), u = RandomActs(rng, n, t);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) {
    const double gd = g.f32[i];
    want[i] = static_cast<float>(gd / (1.0 + std::exp(-gd)) * u.f32[i]);
  }
  auto dg = g.Upload();
  auto du = u.Upload();
  DeviceBytes out(n * 4);
  ASSERT_EQ(LaunchSwiGlu(dg->get(), du->get(), n, out.get(), t, nullptr), 0);
  EXPECT_TRUE(Near(DownloadActs(out, n, t), want, Tol(t, 1e-5)));
}

void CheckConvert(std::mt19937& rng, ActType t) {
  if (t != ActType::kBF16) return;
  const int64_t n = 4099;
  const Acts x = RandomActs(rng, n, ActType::kF32, 100.0f);
  auto dx = x.Upload();
  DeviceBytes b(n * 2), f(n * 4);
  ASSERT_EQ(LaunchConvert(dx->get(), ActType::kF32, b.get(), ActType::kBF16, n, nullptr),
            0);
  const std::vector<uint16_t> bits = Download<uint16_t>(b, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits[i], F32ToBf16(x.f32[i])) << i;
  ASSERT_EQ(LaunchConvert(b.get(), ActType::kBF16, f.get(), ActType::kF32, n, nullptr),
            0);
  const std::vector<float> back = Download<float>(f, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], Bf16ToF32(bits[i])) << i;
}

void CheckRouteTopK(std::mt19937& rng, ActType t) {
  if (t != ActType::kF32) return;
  for (auto [experts, k] : {std::pair<int64_t, int64_t>{8, 2}, {60, 4}, {128, 8}}) {
    const int64_t n = 300;
    const Acts logits = RandomActs(rng, n * experts, ActType::kF32, 2.0f);
    for (bool renorm : {false, true}) {
      std::vector<int32_t> want_ids(n * k);
      std::vector<float> want_w(n * k);
      ops::RouteTopK(logits.f32.data(), n, experts, k, renorm, want_ids.data(), want_w.data());
      auto dl = logits.Upload();
      DeviceBytes ids(n * k * 4), w(n * k * 4);
      ASSERT_EQ(LaunchRouteTopK(dl->as<float>(), n, experts, k, renorm, ids.as<int32_t>(),
                                w.as<float>(), nullptr),
                0);
      // CUDA's expf is within 2 ulp, the host's correctly rounded: two
      // experts whose probabilities lie within a few ulp may come out in
      // either order (about one run in 1,000 with 300 tokens at 128
      // experts). Such a swap is allowed; any other difference is not, and
      // the weights at each rank must agree either way.
      const std::vector<int32_t> got_ids = Download<int32_t>(ids, n * k);
      for (int64_t t = 0; t < n; ++t) {
        const float* l = logits.f32.data() + t * experts;
        const double mx = *std::max_element(l, l + experts);
        for (int64_t j = 0; j < k; ++j) {
          const int32_t g = got_ids[t * k + j], h = want_ids[t * k + j];
          if (g == h) continue;
          ASSERT_TRUE(g >= 0 && g < experts) << "token " << t << " rank " << j;
          const double pg = std::exp(static_cast<double>(l[g]) - mx);
          const double ph = std::exp(static_cast<double>(l[h]) - mx);
          EXPECT_LE(std::fabs(pg - ph), 16 * std::ldexp(1.0, -24) * ph)
              << experts << " experts, top " << k << ", token " << t << " rank " << j
              << ": expert " << g << " against the host's " << h;
        }
      }
      EXPECT_TRUE(Near(Download<float>(w, n * k), want_w, 1e-6));
    }
  }
  // A NaN logit (token 0) or an infinite one (token 1, inf - inf = NaN)
  // makes every probability NaN: the ids must still be k distinct experts
  // (the engine indexes per-expert lists with them), as the host's are.
  {
    const int64_t experts = 8, k = 2;
    std::vector<float> l(2 * experts, 0.5f);
    l[3] = std::numeric_limits<float>::quiet_NaN();
    l[experts + 5] = std::numeric_limits<float>::infinity();
    auto dl = Upload(l);
    DeviceBytes ids(2 * k * 4), w(2 * k * 4);
    ASSERT_EQ(LaunchRouteTopK(dl->as<float>(), 2, experts, k, true, ids.as<int32_t>(),
                              w.as<float>(), nullptr),
              0);
    const std::vector<int32_t> got = Download<int32_t>(ids, 2 * k);
    for (int64_t t = 0; t < 2; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_GE(got[t * k + j], 0) << "token " << t;
        EXPECT_LT(got[t * k + j], experts) << "token " << t;
      }
      EXPECT_NE(got[t * k], got[t * k + 1]) << "token " << t;
    }
  }
  EXPECT_NE(LaunchRouteTopK(nullptr, 1, 8, 9, false, nullptr, nullptr, nullptr), 0);
}

void CheckMoeRouting(std::mt19937& rng, ActType t) {
  const int64_t n = 37, k = 2, experts = 8, hidden = 200;
  std::vector<int32_t> ids(n * k);
  std::vector<float> weights(n * k);
  std::uniform_real_distribution<float> wd(0.1f, 1.0f);
  for (int64_t tok = 0; tok < n; ++tok) {
    std::vector<int32_t> e(experts);
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    for (int64_t j = 0; j < k; ++j) {
      ids[tok * k + j] = e[j];
      weights[tok * k + j] = wd(rng);
    }
  }
  // The host's grouping: expert by expert, pairs in token order.
  std::vector<int32_t> want_off(experts + 1, 0), want_row(n * k), want_tok(n * k);
  int32_t at = 0;
  for (int32_t e = 0; e < experts; ++e) {
    want_off[e] = at;
    for (int64_t p = 0; p < n * k; ++p) {
      if (ids[p] != e) continue;
      want_row[p] = at;
      want_tok[at++] = static_cast<int32_t>(p / k);
    }
  }
  want_off[experts] = at;
  auto di = Upload(ids);
  DeviceBytes off((experts + 1) * 4), row(n * k * 4), tok(n * k * 4);
  ASSERT_EQ(LaunchMoePermute(di->as<int32_t>(), n, k, experts, off.as<int32_t>(),
                             row.as<int32_t>(), tok.as<int32_t>(), nullptr),
            0);
  EXPECT_EQ(Download<int32_t>(off, experts + 1), want_off);
  EXPECT_EQ(Download<int32_t>(row, n * k), want_row);
  EXPECT_EQ(Download<int32_t>(tok, n * k), want_tok);

  const Acts x = RandomActs(rng, n * hidden, t);
  auto dx = x.Upload();
  DeviceBytes gathered(n * k * hidden * 4);
  ASSERT_EQ(LaunchGatherRows(dx->get(), hidden, tok.as<int32_t>(), n * k,
                             gathered.get(), t, nullptr),
            0);
  const std::vector<float> g = DownloadActs(gathered, n * k * hidden, t);
  for (int64_t r = 0; r < n * k; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      ASSERT_EQ(g[r * hidden + i], x.f32[want_tok[r] * hidden + i]) << "row " << r;
    }
  }
  // Unpermute "expert outputs" (random rows) back into tokens.
  const Acts y = RandomActs(rng, n * k * hidden, t);
  auto dy = y.Upload();
  auto dw = Upload(weights);
  DeviceBytes out(n * hidden * 4);
  ASSERT_EQ(LaunchMoeUnpermute(dy->get(), t, hidden, di->as<int32_t>(), row.as<int32_t>(),
                               dw->as<float>(), n, k, out.as<float>(), nullptr),
            0);
  std::vector<float> want(n * hidden, 0.0f);
  for (int64_t tk = 0; tk < n; ++tk) {
    std::vector<int64_t> order = {tk * k, tk * k + 1};
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
    for (int64_t p : order) {
      for (int64_t i = 0; i < hidden; ++i) {
        want[tk * hidden + i] =
            std::fma(weights[p], y.f32[want_row[p] * hidden + i], want[tk * hidden + i]);
      }
    }
  }
  EXPECT_TRUE(Near(Download<float>(out, n * hidden), want, 1e-6));
}

void CheckDecodeAttention(std::mt19937& rng, ActType t) {
  for (auto [heads, kv_heads, head_dim] :
       {std::tuple<int64_t, int64_t, int64_t>{8, 2, 64}, {4, 4, 128}, {16, 4, 256}, {6, 3, 80}}) {
    const int64_t block = 16, max_blocks = 20, num_blocks = 64;
    const std::vector<int32_t> lens = {1, 17, 300, 0, 64};
    const int64_t seqs = static_cast<int64_t>(lens.size());
    // Random distinct blocks per sequence.
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> tables(seqs * max_blocks, 0);
    int64_t next = 0;
    for (int64_t s = 0; s < seqs; ++s) {
      for (int64_t b = 0; b < (lens[s] + block - 1) / block; ++b) {
        tables[s * max_blocks + b] = pool[next++ % num_blocks];
      }
    }
    const int64_t cache = num_blocks * block * kv_heads * head_dim;
    const Acts kc = RandomActs(rng, cache, t), vc = RandomActs(rng, cache, t);
    const Acts q = RandomActs(rng, seqs * heads * head_dim, ActType::kF32);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> want(seqs * heads * head_dim, 0.0f);
    for (int64_t s = 0; s < seqs; ++s) {
      if (lens[s] == 0) continue;
      std::vector<float> k(lens[s] * kv_heads * head_dim), v(k.size());
      for (int64_t p = 0; p < lens[s]; ++p) {
        const int64_t slot = tables[s * max_blocks + p / block] * block + p % block;
        std::copy_n(kc.f32.data() + slot * kv_heads * head_dim, kv_heads * head_dim,
                    k.data() + p * kv_heads * head_dim);
        std::copy_n(vc.f32.data() + slot * kv_heads * head_dim, kv_heads * head_dim,
                    v.data() + p * kv_heads * head_dim);
      }
      ops::ReferenceAttention(q.f32.data() + s * heads * head_dim, 1, heads, k.data(), v.data(),
                              kv_heads, head_dim, lens[s] - 1, scale,
                              want.data() + s * heads * head_dim);
    }
    auto dq = q.Upload();
    auto dk = kc.Upload();
    auto dv = vc.Upload();
    auto dt = Upload(tables);
    auto dl = Upload(lens);
    DeviceBytes out(want.size() * 4);
    ASSERT_EQ(LaunchPagedDecodeAttention(dq->as<float>(), dk->get(), dv->get(), t,
                                         block, kv_heads, head_dim, heads, dt->as<int32_t>(),
                                         max_blocks, dl->as<int32_t>(), seqs, scale,
                                         out.as<float>(), nullptr),
              0);
    EXPECT_TRUE(Near(Download<float>(out, want.size()), want, 1e-5))
        << heads << "/" << kv_heads << " heads of " << head_dim;
  }
}

// WriteKv through a slot mapping, then causal attention of ragged chunks
// (a whole prompt, a one-token chunk, a chunk continuing a sequence) over
// what was written.
void CheckPrefillAttention(std::mt19937& rng, ActType t) {
  for (auto [heads, kv_heads, head_dim] :
       {std::tuple<int64_t, int64_t, int64_t>{8, 2, 64}, {4, 4, 128}, {6, 3, 256}, {2, 1, 40}}) {
    const int64_t block = 16, num_blocks = 48, max_blocks = 8;
    struct Chunk {
      int32_t start, len;
    };
    const std::vector<Chunk> chunks = {{0, 37}, {0, 1}, {50, 20}, {5, 9}};
    const int64_t c_count = static_cast<int64_t>(chunks.size());
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> tables(c_count * max_blocks, 0);
    int64_t next = 0;
    for (int64_t c = 0; c < c_count; ++c) {
      const int64_t keys = chunks[c].start + chunks[c].len;
      for (int64_t b = 0; b < (keys + block - 1) / block; ++b) {
        tables[c * max_blocks + b] = pool[next++];
      }
    }
    // Every key of every chunk's sequence, written through the slot map.
    const int64_t row = kv_heads * head_dim;
    std::vector<int64_t> slots;
    std::vector<std::vector<float>> seq_k(c_count), seq_v(c_count);
    for (int64_t c = 0; c < c_count; ++c) {
      const int64_t keys = chunks[c].start + chunks[c].len;
      seq_k[c] = RandomActs(rng, keys * row, t).f32;
      seq_v[c] = RandomActs(rng, keys * row, t).f32;
      for (int64_t p = 0; p < keys; ++p) {
        slots.push_back(static_cast<int64_t>(tables[c * max_blocks + p / block]) * block +
                        p % block);
      }
    }
    std::vector<float> all_k, all_v;
    for (int64_t c = 0; c < c_count; ++c) {
      all_k.insert(all_k.end(), seq_k[c].begin(), seq_k[c].end());
      all_v.insert(all_v.end(), seq_v[c].begin(), seq_v[c].end());
    }
    slots.push_back(-1);  // a skipped token
    all_k.resize(all_k.size() + row, 1e9f);
    all_v.resize(all_v.size() + row, 1e9f);
    const int64_t tokens = static_cast<int64_t>(slots.size());
    const size_t elem = t == ActType::kBF16 ? 2 : 4;
    const int64_t cache = num_blocks * block * row;
    DeviceBytes kc(cache * elem), vc(cache * elem);
    cudaMemset(kc.get(), 0, cache * elem);
    cudaMemset(vc.get(), 0, cache * elem);
    auto dk = Upload(all_k);
    auto dv = Upload(all_v);
    auto ds = Upload(slots);
    ASSERT_EQ(LaunchWriteKv(dk->as<float>(), dv->as<float>(), tokens, kv_heads, head_dim,
                            ds->as<int64_t>(), kc.get(), vc.get(), t, nullptr),
              0);
    const std::vector<float> kback = DownloadActs(kc, cache, t);
    for (int64_t c = 0, at = 0; c < c_count; ++c) {
      for (int64_t p = 0; p < chunks[c].start + chunks[c].len; ++p, ++at) {
        for (int64_t i = 0; i < row; ++i) {
          ASSERT_EQ(kback[slots[at] * row + i], seq_k[c][p * row + i]) << "chunk " << c;
        }
      }
    }
    // Queries of every chunk, one ragged batch.
    std::vector<int32_t> q_start, q_len, start_pos;
    int32_t rows = 0, max_len = 0;
    for (const Chunk& ch : chunks) {
      q_start.push_back(rows);
      q_len.push_back(ch.len);
      start_pos.push_back(ch.start);
      rows += ch.len;
      max_len = std::max(max_len, ch.len);
    }
    const Acts q = RandomActs(rng, rows * heads * head_dim, ActType::kF32);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> want(q.f32.size());
    for (int64_t c = 0; c < c_count; ++c) {
      ops::ReferenceAttention(q.f32.data() + q_start[c] * heads * head_dim, chunks[c].len, heads,
                              seq_k[c].data(), seq_v[c].data(), kv_heads, head_dim,
                              chunks[c].start, scale, want.data() + q_start[c] * heads * head_dim);
    }
    auto dq = q.Upload();
    auto dt = Upload(tables);
    auto dqs = Upload(q_start);
    auto dql = Upload(q_len);
    auto dsp = Upload(start_pos);
    DeviceBytes out(want.size() * 4);
    ASSERT_EQ(LaunchPrefillAttention(dq->as<float>(), kc.get(), vc.get(), t, block, kv_heads,
                                     head_dim, heads, dt->as<int32_t>(), max_blocks,
                                     dqs->as<int32_t>(), dql->as<int32_t>(), dsp->as<int32_t>(),
                                     c_count, max_len, scale, out.as<float>(), nullptr),
              0);
    EXPECT_TRUE(Near(Download<float>(out, want.size()), want, 1e-5))
        << heads << "/" << kv_heads << " heads of " << head_dim;
  }
}

void CheckArgmax(std::mt19937& rng, ActType t) {
  if (t != ActType::kF32) return;
  const int64_t rows = 9, vocab = 32003;
  Acts l = RandomActs(rng, rows * vocab, ActType::kF32);
  // Row 1: a tie between two maxima; row 2: all equal; row 3: a NaN; row
  // 4: a NaN first; row 5: a NaN, then -inf only.
  l.f32[1 * vocab + 500] = l.f32[1 * vocab + 20000] = 100.0f;
  std::fill_n(l.f32.begin() + 2 * vocab, vocab, -3.0f);
  l.f32[3 * vocab + 7] = std::nanf("");
  l.f32[4 * vocab] = std::nanf("");
  std::fill_n(l.f32.begin() + 5 * vocab, vocab, -std::numeric_limits<float>::infinity());
  l.f32[5 * vocab] = std::nanf("");
  // The host's rule: NaNs skipped wherever they stand, the first of equal
  // maxima, 0 for a row of NaNs only.
  std::vector<int32_t> want(rows);
  for (int64_t r = 0; r < rows; ++r) want[r] = ops::ArgMax(l.f32.data() + r * vocab, vocab);
  auto dl = l.Upload();
  DeviceBytes ids(rows * 4);
  ASSERT_EQ(LaunchArgmax(dl->as<float>(), rows, vocab, ids.as<int32_t>(), nullptr), 0);
  EXPECT_EQ(Download<int32_t>(ids, rows), want);
  EXPECT_EQ(want[1], 500);
  EXPECT_EQ(want[2], 0);
  EXPECT_NE(want[4], 0);
  EXPECT_EQ(want[5], 1);
  // Greedy pick: the same ids and the host's log-probs of them (the NaN
  // row's is NaN on both sides).
  DeviceBytes ids2(rows * 4), lps(rows * 4);
  ASSERT_EQ(LaunchGreedyPick(dl->as<float>(), rows, vocab, ids2.as<int32_t>(), lps.as<float>(),
                             nullptr),
            0);
  EXPECT_EQ(Download<int32_t>(ids2, rows), want);
  const std::vector<float> got = Download<float>(lps, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float ref = ops::LogProb(l.f32.data() + r * vocab, vocab, want[r]);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got[r])) << r;
    } else {
      EXPECT_NEAR(got[r], ref, 1e-6 * std::max(1.0f, std::fabs(ref))) << r;
    }
  }
}

void CheckGemm(std::mt19937& rng, ActType t) {
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto handle = CublasHandle::Create(*stream);
  ASSERT_TRUE(handle.ok()) << handle.status();
  const int64_t n = 96, k = 160;
  for (int64_t m : {1, 5, 64}) {
    const Acts x = RandomActs(rng, m * k, t), w = RandomActs(rng, n * k, t);
    std::vector<float> want(m * n);
    ops::ReferenceLinear(x.f32.data(), m, w.f32.data(), n, k, nullptr, want.data());
    auto dx = x.Upload();
    auto dw = w.Upload();
    DeviceBytes y(m * n * 4);
    ASSERT_TRUE(Gemm(*handle, dx->get(), dw->get(), t, m, n, k, y.as<float>()).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    EXPECT_TRUE(Near(Download<float>(y, m * n), want, 1e-4)) << "m " << m;
  }
  // Per-expert GEMMs over grouped rows, one expert with none: one grouped
  // cuBLAS call (or one GEMM each where cuBLAS refuses the types).
  const std::vector<int32_t> offsets = {0, 4, 4, 9, 10};
  const int64_t rows = offsets.back();
  const Acts x = RandomActs(rng, rows * k, t);
  std::vector<Acts> ws;
  std::vector<std::unique_ptr<DeviceBytes>> dws;
  std::vector<const void*> ptrs;
  std::vector<float> want(rows * n);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    ws.push_back(RandomActs(rng, n * k, t));
    dws.push_back(ws.back().Upload());
    ptrs.push_back(dws.back()->get());
    const int64_t r0 = offsets[e], r = offsets[e + 1] - offsets[e];
    ops::ReferenceLinear(x.f32.data() + r0 * k, r, ws.back().f32.data(), n, k, nullptr,
                         want.data() + r0 * n);
  }
  auto dx = x.Upload();
  DeviceBytes y(rows * n * 4);
  DeviceBytes group_ptrs(3 * ptrs.size() * sizeof(void*));
  ASSERT_TRUE(GroupedGemm(*handle, dx->get(), ptrs, t, offsets, n, k, y.as<float>(),
                          group_ptrs.as<void*>())
                  .ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_TRUE(Near(Download<float>(y, rows * n), want, 1e-4)) << "grouped";
  EXPECT_EQ(GroupedGemm(*handle, dx->get(), ptrs, t, {0, 1}, n, k, y.as<float>(),
                        group_ptrs.as<void*>())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

struct OpCase {
  std::string name;
  OpCheck check;
};

const std::vector<OpCase>& Ops() {
  static const auto* ops = new std::vector<OpCase>{
      {"Embedding", CheckEmbedding},       {"RmsNorm", CheckRmsNorm},
      {"AddRmsNorm", CheckAddRmsNorm},     {"Rope", CheckRope},
      {"SwiGlu", CheckSwiGlu},             {"Convert", CheckConvert},
      {"RouteTopK", CheckRouteTopK},       {"MoeRouting", CheckMoeRouting},
      {"DecodeAttention", CheckDecodeAttention}, {"Argmax", CheckArgmax},
      {"Gemm", CheckGemm},                 {"PrefillAttention", CheckPrefillAttention},
  };
  return *ops;
}

class CudaKernels : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    std::string why;
    devices_ = ListDevices(&why);
    if (devices_.empty()) GTEST_SKIP() << "no GPU: " << why;
  }
  std::vector<DeviceInfo> devices_;
};

TEST_P(CudaKernels, MatchesCpuReference) {
  const OpCase& op = Ops()[GetParam()];
  for (const DeviceInfo& d : devices_) {
    ASSERT_EQ(cudaSetDevice(d.index), cudaSuccess);
    for (ActType t : {ActType::kF32, ActType::kBF16}) {
      const uint32_t seed = std::random_device{}();
      SCOPED_TRACE(absl::StrCat(op.name, " on device ", d.index, " (", d.name, "), ",
                                t == ActType::kF32 ? "f32" : "bf16", ", seed ", seed));
      std::mt19937 rng(seed);
      op.check(rng, t);
      ASSERT_TRUE(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__)
                      .ok());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaKernels, ::testing::Range<size_t>(0, Ops().size()),
                         [](const auto& info) { return Ops()[info.param].name; });

}  // namespace
}  // namespace tandem::cuda
