#include "coordinator/scheduler/block_manager.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::sched {

absl::StatusOr<BlockManager> BlockManager::Create(int64_t block_size, int64_t num_gpu_blocks,
                                                  int64_t num_cpu_blocks, bool prefix_caching) {
  if (block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be > 0, got ", block_size));
  }
  constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max();
  if (num_gpu_blocks < 0 || num_cpu_blocks < 0 || num_gpu_blocks > kMaxBlocks ||
      num_cpu_blocks > kMaxBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("block counts must be in [0, 2^31), got gpu ",
                     num_gpu_blocks, ", cpu ", num_cpu_blocks));
  }
  if (num_gpu_blocks + num_cpu_blocks == 0) {
    return absl::InvalidArgumentError("no KV blocks: both pools are empty");
  }
  BlockManager m;
  m.block_size_ = block_size;
  const int64_t counts[kNumKvPools] = {num_gpu_blocks, num_cpu_blocks};
  for (int i = 0; i < kNumKvPools; ++i) {
    Pool& p = m.pools_[i];
    p.num_blocks = counts[i];
    p.refs.assign(counts[i], 0);
    p.caches = prefix_caching && static_cast<KvPool>(i) == KvPool::kGpu;
    p.cache = PrefixCache(p.caches ? counts[i] : 0);
    // Ascending ids already form a valid min-heap.
    p.free_heap.resize(counts[i]);
    for (int64_t b = 0; b < counts[i]; ++b)
      p.free_heap[b] = static_cast<int32_t>(b);
  }
  return m;
}

int64_t BlockManager::BlocksForTokens(int64_t num_tokens) const {
  TANDEM_CHECK(num_tokens >= 0);
  return (num_tokens + block_size_ - 1) / block_size_;
}

int64_t BlockManager::num_free_blocks(KvPool pool) const {
  const Pool& p = pools_[Index(pool)];
  return static_cast<int64_t>(p.free_heap.size()) + p.cache.num_free();
}

int64_t BlockManager::num_used_blocks(KvPool pool) const {
  return num_blocks(pool) - num_free_blocks(pool);
}

double BlockManager::usage(KvPool pool) const {
  const int64_t total = num_blocks(pool);
  return total == 0 ? 0.0 : static_cast<double>(num_used_blocks(pool)) / total;
}

std::optional<KvPool> BlockManager::PoolOf(int64_t request_id) const {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return std::nullopt;
  return it->second.pool;
}

const std::vector<int32_t>& BlockManager::BlockTable(int64_t request_id) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(request_id);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

int64_t BlockManager::CapacityOf(int64_t request_id) const {
  return static_cast<int64_t>(BlockTable(request_id).size()) * block_size_;
}

int64_t BlockManager::NewBlocksNeeded(int64_t request_id,
                                      int64_t num_tokens) const {
  const int64_t have = static_cast<int64_t>(BlockTable(request_id).size());
  return std::max<int64_t>(0, BlocksForTokens(num_tokens) - have);
}

bool BlockManager::CanAllocate(int64_t request_id, KvPool pool, int64_t num_tokens,
                               const PrefixMatch* prefix) const {
  if (num_tokens < 0 || !is_configured(pool)) return false;
  const std::optional<KvPool> on = PoolOf(request_id);
  if (on.has_value() && *on != pool) return false;
  if (prefix == nullptr || prefix->empty()) {
    return NewBlocksNeeded(request_id, num_tokens) <= num_free_blocks(pool);
  }
  if (on.has_value() || !caches(pool)) return false;
  const Pool& p = pools_[Index(pool)];
  const int64_t shared = static_cast<int64_t>(prefix->blocks.size());
  // Matched blocks no one holds are counted as free but are taken as they
  // are, not for new KV.
  int64_t idle = 0;
  for (int32_t b : prefix->blocks) {
    if (b < 0 || b >= p.num_blocks || !p.cache.IsCached(b)) return false;
    idle += p.cache.IsFree(b) ? 1 : 0;
  }
  const int64_t fresh = std::max<int64_t>(0, BlocksForTokens(num_tokens) - shared);
  return fresh <= num_free_blocks(pool) - idle;
}

int32_t BlockManager::TakeFree(Pool& pool) {
  if (pool.free_heap.empty()) return pool.cache.PopOldestFree();  // evicts
  std::pop_heap(pool.free_heap.begin(), pool.free_heap.end(),
                std::greater<int32_t>());
  const int32_t b = pool.free_heap.back();
  pool.free_heap.pop_back();
  return b;
}

void BlockManager::Release(Pool& pool, int32_t block) {
  int32_t& refs = pool.refs[static_cast<size_t>(block)];
  TANDEM_CHECK(refs > 0);
  if (--refs > 0) return;
  if (pool.caches && pool.cache.IsCached(block)) {
    pool.cache.PushFree(block);
    return;
  }
  pool.free_heap.push_back(block);
  std::push_heap(pool.free_heap.begin(), pool.free_heap.end(), std::greater<int32_t>());
}

absl::Status BlockManager::Allocate(int64_t request_id, KvPool pool, int64_t num_tokens,
                                    const PrefixMatch* prefix) {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative token count ", num_tokens));
  }
  if (!is_configured(pool)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool ", KvPoolName(pool), " has no blocks"));
  }
  const std::optional<KvPool> on = PoolOf(request_id);
  if (on.has_value() && *on != pool) {
    return absl::FailedPreconditionError(
        absl::StrCat("request ", request_id, " has its KV on ", KvPoolName(*on),
                     ", not ", KvPoolName(pool)));
  }
  Pool& p = pools_[Index(pool)];
  const bool shares = prefix != nullptr && !prefix->empty();
  if (shares && (on.has_value() || !p.caches)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request ", request_id, ": a cached prefix only starts a new table on a caching pool"));
  }
  if (!CanAllocate(request_id, pool, num_tokens, prefix)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV pool ", KvPoolName(pool), ": request ", request_id, " needs ",
        NewBlocksNeeded(request_id, num_tokens), " blocks, ", num_free_blocks(pool), " free"));
  }
  if (shares) {
    Table& t = tables_.try_emplace(request_id, Table{pool, {}}).first->second;
    for (int32_t b : prefix->blocks) {
      if (p.refs[static_cast<size_t>(b)]++ == 0) p.cache.RemoveFree(b);
      t.blocks.push_back(b);
    }
    t.num_indexed = static_cast<int64_t>(t.blocks.size());
    t.last_uid = prefix->last_uid;
  }
  const int64_t need = NewBlocksNeeded(request_id, num_tokens);
  if (need == 0) return absl::OkStatus();  // never creates an empty table
  Table& t = tables_.try_emplace(request_id, Table{pool, {}}).first->second;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = TakeFree(p);
    TANDEM_CHECK(p.refs[static_cast<size_t>(b)] == 0);
    p.refs[static_cast<size_t>(b)] = 1;
    t.blocks.push_back(b);
  }
  return absl::OkStatus();
}

void BlockManager::Free(int64_t request_id) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Pool& p = pools_[Index(it->second.pool)];
  // Last block first: a sequence's tail is the least likely to be shared,
  // so it is the first taken back (vLLM frees in the same order).
  const std::vector<int32_t>& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) Release(p, *b);
  tables_.erase(it);
}

PrefixMatch BlockManager::FindCachedPrefix(KvPool pool, const Request& request,
                                           int64_t max_tokens) const {
  PrefixMatch m;
  const Pool& p = pools_[Index(pool)];
  if (!p.caches) return m;
  const int64_t full = std::min(max_tokens, request.num_tokens()) / block_size_;
  for (int64_t i = 0; i < full; ++i) {
    const int32_t b = p.cache.Find(m.last_uid, request.tokens(i * block_size_, block_size_));
    if (b < 0) break;
    m.blocks.push_back(b);
    m.last_uid = p.cache.UidOf(b);
  }
  return m;
}

void BlockManager::CacheComputedBlocks(const Request& request) {
  auto it = tables_.find(request.id());
  if (it == tables_.end()) return;
  Table& t = it->second;
  Pool& p = pools_[Index(t.pool)];
  if (!p.caches || !t.indexable) return;
  const int64_t full = std::min<int64_t>(request.num_computed_tokens() / block_size_,
                                         static_cast<int64_t>(t.blocks.size()));
  for (; t.num_indexed < full; ++t.num_indexed) {
    const int32_t b = t.blocks[static_cast<size_t>(t.num_indexed)];
    TANDEM_CHECK(!p.cache.IsCached(b));
    t.last_uid =
        p.cache.Insert(b, t.last_uid, request.tokens(t.num_indexed * block_size_, block_size_));
  }
}

void BlockManager::ClearPrefixCache() {
  for (Pool& p : pools_) {
    for (int32_t b : p.cache.Clear()) {
      p.free_heap.push_back(b);
      std::push_heap(p.free_heap.begin(), p.free_heap.end(), std::greater<int32_t>());
    }
  }
  for (auto& [id, t] : tables_) t.indexable = false;
}

absl::Status BlockManager::CheckInvariants() const {
  for (int i = 0; i < kNumKvPools; ++i) {
    const Pool& p = pools_[i];
    const char* name = KvPoolName(static_cast<KvPool>(i));
    std::vector<int64_t> held(p.num_blocks, 0);  // tables holding each block
    std::vector<bool> free(p.num_blocks, false);
    for (int32_t b : p.free_heap) {
      if (b < 0 || b >= p.num_blocks || free[b] || p.refs[b] != 0 ||
          (p.caches && p.cache.IsCached(b))) {
        return absl::InternalError(
            absl::StrCat(name, " block ", b, " bad in the free list"));
      }
      free[b] = true;
    }
    if (!std::is_heap(p.free_heap.begin(), p.free_heap.end(),
                      std::greater<int32_t>())) {
      return absl::InternalError(
          absl::StrCat(name, " free list is not a heap"));
    }
    for (const auto& [id, t] : tables_) {
      if (t.pool != static_cast<KvPool>(i)) continue;
      if (t.blocks.empty()) {
        return absl::InternalError(
            absl::StrCat("request ", id, " has an empty table"));
      }
      absl::flat_hash_map<int32_t, bool> in_table;
      for (int32_t b : t.blocks) {
        if (b < 0 || b >= p.num_blocks || free[b] || !in_table.emplace(b, true).second) {
          return absl::InternalError(
              absl::StrCat(name, " block ", b, " of request ", id, " is also free or twice in it"));
        }
        ++held[b];
      }
      if (t.num_indexed > static_cast<int64_t>(t.blocks.size())) {
        return absl::InternalError(absl::StrCat("request ", id, " indexed past its table"));
      }
    }
    if (!p.caches) {
      if (p.cache.num_cached() != 0) {
        return absl::InternalError(absl::StrCat(name, " pool caches without prefix caching"));
      }
    } else {
      TANDEM_RETURN_IF_ERROR(p.cache.CheckInvariants());
    }
    for (int64_t b = 0; b < p.num_blocks; ++b) {
      if (held[b] != p.refs[b]) {
        return absl::InternalError(absl::StrCat(name, " block ", b, " is held by ", held[b],
                                                " tables but counted ", p.refs[b]));
      }
      const bool idle = p.caches && p.cache.IsFree(static_cast<int32_t>(b));
      if (p.refs[b] == 0 && free[b] == idle) {
        return absl::InternalError(
            absl::StrCat(name, " block ", b, idle ? " is both free and cached-free" : " is lost"));
      }
      if (p.refs[b] > 0 && idle) {
        return absl::InternalError(absl::StrCat(name, " block ", b, " is held and cached-free"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::sched
