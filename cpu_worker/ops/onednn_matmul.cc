#include "cpu_worker/ops/onednn_matmul.h"

#include <cstdio>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/status_macros.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace tandem::ops::internal {
namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, int, bool>;  // m, n, k, type, bias

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

// Only called inside a try block: the engine constructor may throw.
const dnnl::engine& Engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

[[noreturn]] void DnnlFailed(const char* what, const dnnl::error& e) {
  std::fprintf(stderr, "oneDNN %s failed: %s (status %d)\n", what, e.what(),
               static_cast<int>(e.status));
  TANDEM_CHECK(false && "oneDNN call failed");
  __builtin_unreachable();
}

std::shared_ptr<const Entry> CreateEntry(int64_t m, int64_t n, int64_t k, MatmulType type,
                                         bool has_bias) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dt in = type == MatmulType::kBF16 ? dt::bf16 : dt::f32;
  try {
    dnnl::memory::desc src_md({m, k}, in, tag::ab);
    // The [n, k] row-major weight is the [k, n] matrix in column-major order.
    dnnl::memory::desc wei_md({k, n}, in, tag::ba);
    dnnl::memory::desc dst_md({m, n}, dt::f32, tag::ab);
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
                                      bool has_bias) {
  const Key key(m, n, k, static_cast<int>(type), has_bias);
  Cache& cache = GetCache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.map.find(key);
    if (it != cache.map.end()) return it->second;
  }
  // Built outside the lock: creation can take a while and two threads racing
  // on the same key just build it twice.
  std::shared_ptr<const Entry> entry = CreateEntry(m, n, k, type, has_bias);
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
};

ThreadState& GetThreadState() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

void OnednnMatmul(const void* x, int64_t m, const void* w, int64_t n, int64_t k, const float* bias,
                  MatmulType type, float* y) {
  TANDEM_CHECK(m >= 0 && n > 0 && k > 0);
  TANDEM_CHECK(x != nullptr || m == 0);
  TANDEM_CHECK(w != nullptr && y != nullptr);
  if (m == 0) return;
  std::shared_ptr<const Entry> entry = GetEntry(m, n, k, type, bias != nullptr);
  ThreadState& ts = GetThreadState();
  if (ts.scratchpad.size() < entry->scratchpad_bytes) {
    ts.scratchpad.resize(entry->scratchpad_bytes);
  }
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dt in = type == MatmulType::kBF16 ? dt::bf16 : dt::f32;
  try {
    const dnnl::engine& eng = Engine();
    if (!ts.stream) ts.stream = std::make_unique<dnnl::stream>(eng);
    // oneDNN takes non-const handles; it does not write src/weights/bias.
    dnnl::memory src({{m, k}, in, tag::ab}, eng, const_cast<void*>(x));
    dnnl::memory wei({{k, n}, in, tag::ba}, eng, const_cast<void*>(w));
    dnnl::memory dst({{m, n}, dt::f32, tag::ab}, eng, y);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    if (entry->scratchpad_bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory({{static_cast<int64_t>(entry->scratchpad_bytes)}, dt::u8, tag::a},
                                eng, ts.scratchpad.data()));
    }
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS,
                   dnnl::memory({{1, n}, dt::f32, tag::ab}, eng, const_cast<float*>(bias)));
    }
    entry->prim.execute(*ts.stream, args);
    ts.stream->wait();
  } catch (const dnnl::error& e) {
    DnnlFailed("matmul execution", e);
  }
}

size_t OnednnMatmulCacheSize() {
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.map.size();
}

}  // namespace tandem::ops::internal
