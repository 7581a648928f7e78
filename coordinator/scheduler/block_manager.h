// KV block accounting for the scheduler: two pools of fixed-size blocks (GPU
// and CPU), one block table per request. Only bookkeeping; the bytes live in
// the workers' caches, which follow the tables sent in each StepPlan.
//
// Block ids are per pool, 0..num_blocks-1, and allocation hands out the
// lowest free id that holds no cached KV, so the same sequence of calls
// yields the same tables.
//
// Prefix caching (on the GPU pool when enabled): a request's full blocks whose
// KV is computed are indexed by content (PrefixCache) and may be shared by
// later requests whose tokens start the same way; a block is counted by the
// tables holding it and, when none does, waits in an LRU list as a free block
// that still holds reusable KV. Only full blocks before a request's first
// uncomputed token are ever shared, and a request writes only at positions at
// or after that token, so a shared block is never written.
#ifndef TANDEM_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_
#define TANDEM_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/scheduler/prefix_cache.h"
#include "coordinator/scheduler/request.h"

namespace tandem::sched {

// The longest run of cached blocks that starts a request's tokens.
struct PrefixMatch {
  std::vector<int32_t> blocks;
  uint64_t last_uid = PrefixCache::kRoot;  // of the last block
  bool empty() const { return blocks.empty(); }
};

class BlockManager {
 public:
  // A pool of 0 blocks is "not configured". At least one pool must have blocks.
  // `prefix_caching`: the GPU pool indexes computed blocks for sharing.
  static absl::StatusOr<BlockManager> Create(int64_t block_size, int64_t num_gpu_blocks,
                                             int64_t num_cpu_blocks, bool prefix_caching = false);

  int64_t block_size() const { return block_size_; }
  // ceil(num_tokens / block_size).
  int64_t BlocksForTokens(int64_t num_tokens) const;

  // Pool figures (for admission and metrics).
  int64_t num_blocks(KvPool pool) const {
    return pools_[Index(pool)].num_blocks;
  }
  // Free blocks include cached ones no request holds (they are taken back,
  // least recently freed first, when no other block is free).
  int64_t num_free_blocks(KvPool pool) const;
  int64_t num_used_blocks(KvPool pool) const;
  double usage(KvPool pool) const;  // used / total, 0 for an unconfigured pool
  bool is_configured(KvPool pool) const { return num_blocks(pool) > 0; }

  // Per-request tables. A request has a table from its first Allocate until
  // Free; the table lives on one pool.
  bool HasTable(int64_t request_id) const {
    return tables_.contains(request_id);
  }
  std::optional<KvPool> PoolOf(int64_t request_id) const;
  // Empty for an unknown request.
  const std::vector<int32_t>& BlockTable(int64_t request_id) const;
  // Tokens the request's blocks can hold (0 if unknown).
  int64_t CapacityOf(int64_t request_id) const;
  // Blocks that Allocate(request_id, ..., num_tokens) would add.
  int64_t NewBlocksNeeded(int64_t request_id, int64_t num_tokens) const;
  // Whether Allocate(request_id, pool, num_tokens, prefix) would succeed.
  bool CanAllocate(int64_t request_id, KvPool pool, int64_t num_tokens,
                   const PrefixMatch* prefix = nullptr) const;

  // Grows the request's table on `pool` to hold `num_tokens` tokens (tables
  // never shrink; asking for less than the capacity is a no-op). Creates the
  // table on first use, starting with the blocks of `prefix` (from
  // FindCachedPrefix on this pool, just before) when one is given.
  // ResourceExhausted when the pool lacks free blocks (nothing is taken
  // then); FailedPrecondition when the request's table is on the other pool
  // or a prefix is given for a request that has a table; InvalidArgument for
  // an unconfigured pool or bad count.
  absl::Status Allocate(int64_t request_id, KvPool pool, int64_t num_tokens,
                        const PrefixMatch* prefix = nullptr);
  // Returns every block of the request to its pool; unknown ids are ignored.
  void Free(int64_t request_id);

  // Prefix caching. Whether `pool` indexes its blocks.
  bool caches(KvPool pool) const { return pools_[Index(pool)].caches; }
  // The cached blocks holding the request's first tokens, at most
  // `max_tokens` of them (whole blocks); empty on a pool that does not cache.
  PrefixMatch FindCachedPrefix(KvPool pool, const Request& request, int64_t max_tokens) const;
  // Indexes the request's full blocks whose KV its computed tokens cover
  // (call after num_computed_tokens advances). No-op on a pool that does
  // not cache or for a request without a table.
  void CacheComputedBlocks(const Request& request);
  // Forgets every cached block (the workers' KV is gone); tables keep their
  // blocks but index nothing more.
  void ClearPrefixCache();
  int64_t num_cached_blocks(KvPool pool) const { return pools_[Index(pool)].cache.num_cached(); }

  int64_t num_tables() const { return static_cast<int64_t>(tables_.size()); }

  // Exact accounting: every block of each pool is either free (once, in the
  // free heap or the cache's LRU list) or counted by exactly the tables of
  // that pool holding it. Internal error describing the first break.
  absl::Status CheckInvariants() const;

 private:
  struct Pool {
    int64_t num_blocks = 0;
    std::vector<int32_t> free_heap;  // min-heap of free blocks holding no cached KV
    std::vector<int32_t> refs;       // [num_blocks] tables holding the block
    bool caches = false;
    PrefixCache cache;
  };
  struct Table {
    KvPool pool;
    std::vector<int32_t> blocks;
    // Leading blocks already indexed (or matched), and the uid the next one
    // chains from. indexable: false after ClearPrefixCache.
    int64_t num_indexed = 0;
    uint64_t last_uid = PrefixCache::kRoot;
    bool indexable = true;
  };

  BlockManager() = default;
  static int Index(KvPool pool) { return static_cast<int>(pool); }
  int32_t TakeFree(Pool& pool);
  void Release(Pool& pool, int32_t block);

  int64_t block_size_ = 0;
  std::array<Pool, kNumKvPools> pools_;
  absl::flat_hash_map<int64_t, Table> tables_;
};

}  // namespace tandem::sched

#endif  // TANDEM_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_
