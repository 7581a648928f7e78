// Paged KV cache of the engine: fixed-size blocks of token slots, handed out
// to sequences through block tables (vLLM's layout), so sequences of any
// length share one pool and a finished sequence returns its blocks at once.
#ifndef TANDEM_GPU_WORKER_ENGINE_KV_CACHE_H_
#define TANDEM_GPU_WORKER_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cpu_worker/kv/huge_page_array.h"
#include "cpu_worker/ops/attention.h"
#include "gpu_worker/engine/device.h"

namespace tandem {

class KvCache {
 public:
  // Allocates num_blocks blocks of block_size slots for every layer, on
  // `device` (not owned, outlives the cache; null: host huge pages).
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(int64_t num_layers, int64_t kv_heads,
                                                         int64_t head_dim, int64_t num_blocks,
                                                         int64_t block_size,
                                                         Device* device = nullptr);

  // Makes room for positions [0, new_length) of a sequence, creating it if
  // new. ResourceExhausted if the pool runs out (nothing is taken then).
  absl::Status Reserve(int64_t seq_id, int64_t new_length);
  // Follows a table made by the caller instead (the coordinator's scheduler,
  // which owns allocation when sequences share blocks): the sequence uses
  // exactly `table`, which must cover [0, new_length). The caller sees to it
  // that no two sequences write the same slot. A cache follows callers'
  // tables or allocates itself: FailedPrecondition for Adopt while
  // Reserve'd sequences hold blocks, and for Reserve while adopted ones
  // live; InvalidArgument for a block id outside the pool, one listed
  // twice, or a table too short (nothing changes then).
  absl::Status Adopt(int64_t seq_id, absl::Span<const int32_t> table, int64_t new_length);
  // Returns the sequence's blocks to the pool (forgets an adopted table);
  // unknown ids are ignored.
  void Free(int64_t seq_id);
  bool Has(int64_t seq_id) const { return seqs_.contains(seq_id); }
  // Positions reserved for the sequence (0 if unknown).
  int64_t Capacity(int64_t seq_id) const;
  const std::vector<int32_t>& BlockTable(int64_t seq_id) const;

  ops::PagedKvLayer Layer(int64_t layer) const;
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

 private:
  KvCache() = default;
  int64_t num_layers_ = 0, kv_heads_ = 0, head_dim_ = 0, num_blocks_ = 0, block_size_ = 0;
  // [layers, blocks, ...] in host memory or on the device; a block's layout
  // is the device's own (ops::PagedKvLayer for the host device).
  HugePageArray host_k_, host_v_;
  DeviceMemory dev_k_, dev_v_;
  float* k_ = nullptr;
  float* v_ = nullptr;
  std::vector<int32_t> free_;
  absl::flat_hash_map<int64_t, std::vector<int32_t>> seqs_;
  absl::flat_hash_set<int64_t> adopted_;  // sequences whose table is the caller's
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_KV_CACHE_H_
