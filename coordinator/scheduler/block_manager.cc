#include "coordinator/scheduler/block_manager.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::sched {

absl::StatusOr<BlockManager> BlockManager::Create(int64_t block_size,
                                                  int64_t num_gpu_blocks,
                                                  int64_t num_cpu_blocks) {
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
    p.owner.assign(counts[i], -1);
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
  return static_cast<int64_t>(pools_[Index(pool)].free_heap.size());
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

bool BlockManager::CanAllocate(int64_t request_id, KvPool pool,
                               int64_t num_tokens) const {
  if (num_tokens < 0 || !is_configured(pool)) return false;
  const std::optional<KvPool> on = PoolOf(request_id);
  if (on.has_value() && *on != pool) return false;
  return NewBlocksNeeded(request_id, num_tokens) <= num_free_blocks(pool);
}

int32_t BlockManager::TakeLowestFree(Pool& pool) {
  TANDEM_CHECK(!pool.free_heap.empty());
  std::pop_heap(pool.free_heap.begin(), pool.free_heap.end(),
                std::greater<int32_t>());
  const int32_t b = pool.free_heap.back();
  pool.free_heap.pop_back();
  return b;
}

absl::Status BlockManager::Allocate(int64_t request_id, KvPool pool,
                                    int64_t num_tokens) {
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
  const int64_t need = NewBlocksNeeded(request_id, num_tokens);
  Pool& p = pools_[Index(pool)];
  if (need > static_cast<int64_t>(p.free_heap.size())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV pool ", KvPoolName(pool), ": request ", request_id, " needs ", need,
        " blocks, ", p.free_heap.size(), " free"));
  }
  if (need == 0) return absl::OkStatus();  // never creates an empty table
  Table& t = tables_.try_emplace(request_id, Table{pool, {}}).first->second;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = TakeLowestFree(p);
    TANDEM_CHECK(p.owner[b] == -1);
    p.owner[b] = request_id;
    t.blocks.push_back(b);
  }
  return absl::OkStatus();
}

void BlockManager::Free(int64_t request_id) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Pool& p = pools_[Index(it->second.pool)];
  for (int32_t b : it->second.blocks) {
    TANDEM_CHECK(p.owner[b] == request_id);
    p.owner[b] = -1;
    p.free_heap.push_back(b);
    std::push_heap(p.free_heap.begin(), p.free_heap.end(),
                   std::greater<int32_t>());
  }
  tables_.erase(it);
}

absl::Status BlockManager::CheckInvariants() const {
  for (int i = 0; i < kNumKvPools; ++i) {
    const Pool& p = pools_[i];
    const char* name = KvPoolName(static_cast<KvPool>(i));
    std::vector<int> seen(p.num_blocks, 0);  // 1: free, 2: in a table
    for (int32_t b : p.free_heap) {
      if (b < 0 || b >= p.num_blocks || seen[b] != 0 || p.owner[b] != -1) {
        return absl::InternalError(
            absl::StrCat(name, " block ", b, " bad in the free list"));
      }
      seen[b] = 1;
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
      for (int32_t b : t.blocks) {
        if (b < 0 || b >= p.num_blocks || seen[b] != 0 || p.owner[b] != id) {
          return absl::InternalError(absl::StrCat(
              name, " block ", b, " of request ", id, " is also elsewhere"));
        }
        seen[b] = 2;
      }
    }
    for (int64_t b = 0; b < p.num_blocks; ++b) {
      if (seen[b] == 0) {
        return absl::InternalError(
            absl::StrCat(name, " block ", b, " is lost"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::sched
