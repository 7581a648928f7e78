// KV block accounting for the scheduler: two pools of fixed-size blocks (GPU
// and CPU), one block table per request. Only bookkeeping; the bytes live in
// the workers' caches, which follow the tables sent in each StepPlan.
//
// Block ids are per pool, 0..num_blocks-1, and allocation always hands out the
// lowest free id, so the same sequence of calls yields the same tables.
#ifndef TANDEM_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_
#define TANDEM_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/scheduler/request.h"

namespace tandem::sched {

class BlockManager {
 public:
  // A pool of 0 blocks is "not configured". At least one pool must have blocks.
  static absl::StatusOr<BlockManager> Create(int64_t block_size,
                                             int64_t num_gpu_blocks,
                                             int64_t num_cpu_blocks);

  int64_t block_size() const { return block_size_; }
  // ceil(num_tokens / block_size).
  int64_t BlocksForTokens(int64_t num_tokens) const;

  // Pool figures (for admission and metrics).
  int64_t num_blocks(KvPool pool) const {
    return pools_[Index(pool)].num_blocks;
  }
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
  // Whether Allocate(request_id, pool, num_tokens) would succeed.
  bool CanAllocate(int64_t request_id, KvPool pool, int64_t num_tokens) const;

  // Grows the request's table on `pool` to hold `num_tokens` tokens (tables
  // never shrink; asking for less than the capacity is a no-op). Creates the
  // table on first use. ResourceExhausted when the pool lacks free blocks
  // (nothing is taken then); FailedPrecondition when the request's table is on
  // the other pool; InvalidArgument for an unconfigured pool or bad count.
  absl::Status Allocate(int64_t request_id, KvPool pool, int64_t num_tokens);
  // Returns every block of the request to its pool; unknown ids are ignored.
  void Free(int64_t request_id);

  int64_t num_tables() const { return static_cast<int64_t>(tables_.size()); }

  // Exact accounting: every block of each pool is either free (once) or in
  // exactly one table of that pool. Internal error describing the first break.
  absl::Status CheckInvariants() const;

 private:
  struct Pool {
    int64_t num_blocks = 0;
    std::vector<int32_t> free_heap;  // min-heap of free block ids
    std::vector<int64_t> owner;      // [num_blocks] request id, -1 when free
  };
  struct Table {
    KvPool pool;
    std::vector<int32_t> blocks;
  };

  BlockManager() = default;
  static int Index(KvPool pool) { return static_cast<int>(pool); }
  int32_t TakeLowestFree(Pool& pool);

  int64_t block_size_ = 0;
  std::array<Pool, kNumKvPools> pools_;
  absl::flat_hash_map<int64_t, Table> tables_;
};

}  // namespace tandem::sched

#endif  // TANDEM_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_
