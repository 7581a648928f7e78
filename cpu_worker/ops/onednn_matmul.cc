#include "cpu_worker/ops/onednn_matmul.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/cpu_features.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace tandem::ops::internal {
namespace {

// How the operands are laid out: x · w^T with w [n, k] row-major, its
// transpose w · x^T with the weight as source (then m is the primitive's
// N), or x · w^T with w packed by PackBf16.
enum class Form { kPlain, kWeightAsSrc, kPacked };

// m, n, k, type, bias, form.
using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, Form>;

struct Entry {
  dnnl::matmul prim;
  size_t scratchpad_bytes = 0;
};

struct Cache {
  std::mutex mu;
  absl::flat_hash_map<Key, std::shared_ptr<const Entry>> map;
};

Cache& GetCache() {
  static Cache* cache = new Cache;
  return *cache;
}

// Where TANDEM_CPU_ISA caps the hand-written kernels at AVX2 or scalar,
// oneDNN is capped the same way before its first use, so that a capped run
// stands for a CPU of that level: without it oneDNN kept its AVX-512 and
// AVX512-BF16 kernels under TANDEM_CPU_ISA=avx2, and GEMMs measured "on
// AVX2" were a faster CPU's. (TANDEM_CPU_ISA=f32 stands for an AVX-512 CPU
// without bf16 GEMMs, whose f32 GEMMs oneDNN runs as here.) A cap the user
// set through ONEDNN_MAX_CPU_ISA stays: oneDNN then refuses this one.
void CapOnednnIsa() {
  const KernelIsa isa = MaxKernelIsa();
  if (isa > KernelIsa::kAvx2) return;
  (void)dnnl::set_max_cpu_isa(isa == KernelIsa::kAvx2 ? dnnl::cpu_isa::avx2
                                                      : dnnl::cpu_isa::sse41);
}

// Only called inside a try block: the engine constructor may throw.
const dnnl::engine& Engine() {
  static const dnnl::engine* engine = [] {
    CapOnednnIsa();
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return *engine;
}

[[noreturn]] void DnnlFailed(const char* what, const dnnl::error& e) {
  std::fprintf(stderr, "oneDNN %s failed: %s (status %d)\n", what, e.what(),
               static_cast<int>(e.status));
  TANDEM_CHECK(false && "oneDNN call failed");
  __builtin_unreachable();
}

// The memory descriptors of src, weights and dst. Normally src is x [m, k]
// and the weight, [n, k] row-major, is the [k, n] matrix in column-major
// order. With the weight as source: src is w [n, k], the weights operand
// is x^T ([k, m], x row-major) and dst is y^T [n, m]. Packed: the weight is
// the [k, n] matrix in the blocked layout BA16a64b2a.
struct Descs {
  dnnl::memory::desc src, wei, dst;
};

Descs MakeDescs(int64_t m, int64_t n, int64_t k, MatmulType type, Form form) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dt in = type == MatmulType::kBF16 ? dt::bf16 : dt::f32;
  if (form == Form::kPacked) {
    return {dnnl::memory::desc({m, k}, in, tag::ab),
            dnnl::memory::desc({k, n}, in, tag::BA16a64b2a),
            dnnl::memory::desc({m, n}, dt::f32, tag::ab)};
  }
  if (form == Form::kWeightAsSrc) {
    return {dnnl::memory::desc({n, k}, in, tag::ab), dnnl::memory::desc({k, m}, in, tag::ba),
            dnnl::memory::desc({n, m}, dt::f32, tag::ab)};
  }
  return {dnnl::memory::desc({m, k}, in, tag::ab), dnnl::memory::desc({k, n}, in, tag::ba),
          dnnl::memory::desc({m, n}, dt::f32, tag::ab)};
}

std::shared_ptr<const Entry> CreateEntry(int64_t m, int64_t n, int64_t k, MatmulType type,
                                         bool has_bias, Form form) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  try {
    const Descs d = MakeDescs(m, n, k, type, form);
    const dnnl::memory::desc& src_md = d.src;
    const dnnl::memory::desc& wei_md = d.wei;
    const dnnl::memory::desc& dst_md = d.dst;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    std::unique_ptr<dnnl::matmul::desc> desc;
    if (has_bias) {
      dnnl::memory::desc bias_md({1, n}, dt::f32, tag::ab);
      desc = std::make_unique<dnnl::matmul::desc>(src_md, wei_md, bias_md, dst_md);
    } else {
      desc = std::make_unique<dnnl::matmul::desc>(src_md, wei_md, dst_md);
    }
    dnnl::matmul::primitive_desc pd(*desc, attr, Engine());
    auto entry = std::make_shared<Entry>();
    entry->scratchpad_bytes = pd.scratchpad_desc().get_size();
    entry->prim = dnnl::matmul(pd);
    return entry;
  } catch (const dnnl::error& e) {
    DnnlFailed("matmul creation", e);
  }
}

std::shared_ptr<const Entry> GetEntry(int64_t m, int64_t n, int64_t k, MatmulType type,
                                      bool has_bias, Form form = Form::kPlain) {
  const Key key(m, n, k, static_cast<int>(type), has_bias, form);
  Cache& cache = GetCache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.map.find(key);
    if (it != cache.map.end()) return it->second;
  }
  // Built outside the lock: creation can take a while and two threads racing
  // on the same key just build it twice.
  std::shared_ptr<const Entry> entry = CreateEntry(m, n, k, type, has_bias, form);
  std::lock_guard<std::mutex> lock(cache.mu);
  if (cache.map.size() >= kOnednnMatmulCacheLimit) cache.map.clear();
  auto [it, inserted] = cache.map.emplace(key, std::move(entry));
  return it->second;
}

// Per-thread execution state: the stream and the scratchpad buffer, reused
// between calls (grown, never shrunk).
struct ThreadState {
  std::unique_ptr<dnnl::stream> stream;
  std::vector<uint8_t> scratchpad;
  std::vector<float> yt;  // y^T of OnednnMatmulWeightAsSrc
};

ThreadState& GetThreadState() {
  thread_local ThreadState state;
  return state;
}

// Runs `entry`, made by CreateEntry(m, n, k, type, ..., form), on src,
// weights and dst (its operands, so swapped for Form::kWeightAsSrc).
void Execute(const Entry& entry, int64_t m, int64_t n, int64_t k, MatmulType type,
             Form form, const void* src, const void* wei, float* dst, const float* bias) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  ThreadState& ts = GetThreadState();
  if (ts.scratchpad.size() < entry.scratchpad_bytes) ts.scratchpad.resize(entry.scratchpad_bytes);
  try {
    const dnnl::engine& eng = Engine();
    if (!ts.stream) ts.stream = std::make_unique<dnnl::stream>(eng);
    const Descs d = MakeDescs(m, n, k, type, form);
    // oneDNN takes non-const handles; it does not write src/weights/bias.
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(d.src, eng, const_cast<void*>(src))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(d.wei, eng, const_cast<void*>(wei))},
        {DNNL_ARG_DST, dnnl::memory(d.dst, eng, dst)}};
    if (entry.scratchpad_bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory({{static_cast<int64_t>(entry.scratchpad_bytes)}, dt::u8, tag::a},
                                eng, ts.scratchpad.data()));
    }
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS,
                   dnnl::memory({{1, n}, dt::f32, tag::ab}, eng, const_cast<float*>(bias)));
    }
    entry.prim.execute(*ts.stream, args);
    ts.stream->wait();
  } catch (const dnnl::error& e) {
    DnnlFailed("matmul execution", e);
  }
}

}  // namespace

void OnednnMatmul(const void* x, int64_t m, const void* w, int64_t n, int64_t k, const float* bias,
                  MatmulType type, float* y) {
  TANDEM_CHECK(m >= 0 && n > 0 && k > 0);
  TANDEM_CHECK(x != nullptr || m == 0);
  TANDEM_CHECK(w != nullptr && y != nullptr);
  if (m == 0) return;
  std::shared_ptr<const Entry> entry = GetEntry(m, n, k, type, bias != nullptr);
  Execute(*entry, m, n, k, type, Form::kPlain, x, w, y, bias);
}

void OnednnMatmulWeightAsSrc(const uint16_t* x, int64_t m, int64_t cols, const uint16_t* w,
                             int64_t n, int64_t k, const float* bias, float* y) {
  TANDEM_CHECK(m >= 0 && cols >= m && n > 0 && k > 0);
  TANDEM_CHECK(x != nullptr || m == 0);
  TANDEM_CHECK(w != nullptr && y != nullptr);
  if (m == 0) return;
  // The bias is added below, per row of y^T (oneDNN's bias runs along N).
  std::shared_ptr<const Entry> entry =
      GetEntry(cols, n, k, MatmulType::kBF16, /*has_bias=*/false, Form::kWeightAsSrc);
  std::vector<float>& yt = GetThreadState().yt;
  if (static_cast<int64_t>(yt.size()) < n * cols) yt.resize(static_cast<size_t>(n * cols));
  Execute(*entry, cols, n, k, MatmulType::kBF16, Form::kWeightAsSrc, w, x, yt.data(), nullptr);
  // y = (y^T)^T + bias, in blocks of 64 outputs: their y^T rows (64 lines)
  // stay in L1 while each row of y is written contiguously.
  constexpr int64_t kBlock = 64;
  const float* t = yt.data();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n * m > (1 << 15))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kBlock, j1 = std::min(n, j0 + kBlock);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = j0; j < j1; ++j) {
        y[i * n + j] = t[j * cols + i] + (bias != nullptr ? bias[j] : 0.0f);
      }
    }
  }
}

int64_t PackedBf16Bytes(int64_t n, int64_t k) {
  TANDEM_CHECK(n > 0 && k > 0);
  try {
    const Descs d = MakeDescs(1, n, k, MatmulType::kBF16, Form::kPacked);
    return static_cast<int64_t>(d.wei.get_size());
  } catch (const dnnl::error& e) {
    DnnlFailed("packed weight size", e);
  }
}

void PackBf16(const uint16_t* w, int64_t n, int64_t k, void* packed) {
  TANDEM_CHECK(w != nullptr && packed != nullptr && n > 0 && k > 0);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  try {
    const dnnl::engine& eng = Engine();
    ThreadState& ts = GetThreadState();
    if (!ts.stream) ts.stream = std::make_unique<dnnl::stream>(eng);
    // The row-major [n, k] weight is the [k, n] matrix in column-major order.
    dnnl::memory src({{k, n}, dt::bf16, tag::ba}, eng, const_cast<uint16_t*>(w));
    dnnl::memory dst(MakeDescs(1, n, k, MatmulType::kBF16, Form::kPacked).wei, eng, packed);
    dnnl::reorder(src, dst).execute(*ts.stream, src, dst);
    ts.stream->wait();
  } catch (const dnnl::error& e) {
    DnnlFailed("weight packing", e);
  }
}

void OnednnMatmulPacked(const uint16_t* x, int64_t m, const void* packed, int64_t n, int64_t k,
                        const float* bias, float* y) {
  TANDEM_CHECK(m >= 0 && n > 0 && k > 0);
  TANDEM_CHECK(x != nullptr || m == 0);
  TANDEM_CHECK(packed != nullptr && y != nullptr);
  if (m == 0) return;
  std::shared_ptr<const Entry> entry =
      GetEntry(m, n, k, MatmulType::kBF16, bias != nullptr, Form::kPacked);
  Execute(*entry, m, n, k, MatmulType::kBF16, Form::kPacked, x, packed, y, bias);
}

bool OnednnBf16UsesAmx() {
  static const bool amx = [] {
    try {
      const Descs d = MakeDescs(64, 64, 64, MatmulType::kBF16, Form::kPlain);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.src, d.wei, d.dst), Engine());
      return std::string(pd.impl_info_str()).find("amx") != std::string::npos;
    } catch (const dnnl::error&) {
      return false;  // no bf16 matmul at all
    }
  }();
  return amx;
}

size_t OnednnMatmulCacheSize() {
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.map.size();
}

}  // namespace tandem::ops::internal
