// The CPU KV cache of Neo-style CPU attention: the keys and values of the
// sequences whose attention runs on the CPU, in host memory owned by the
// side that computes that attention (the cpu_worker, or an in-process
// stand-in). Paged like the engine's cache (blocks of block_size token
// slots handed out through per-sequence block tables) so sequences of any
// length share one pool and a freed sequence returns its blocks at once.
//
// Besides the blocks it remembers, per sequence and layer, how many
// positions have been written: layers arrive one message at a time, and a
// chunk may only start where that layer's keys end (or earlier, rewriting a
// step that failed), so attention never reads a slot nobody wrote.
#ifndef TANDEM_CPU_WORKER_KV_CPU_KV_CACHE_H_
#define TANDEM_CPU_WORKER_KV_CPU_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cpu_worker/kv/huge_page_array.h"
#include "cpu_worker/ops/attention.h"

namespace tandem {

struct CpuKvShape {
  int64_t num_layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t capacity_tokens = 0;  // rounded up to whole blocks
};

class CpuKvCache {
 public:
  // InvalidArgument for non-positive sizes; ResourceExhausted if the cache
  // is absurdly large or the memory cannot be had.
  static absl::StatusOr<std::unique_ptr<CpuKvCache>> Create(const CpuKvShape& shape);

  // Makes room for positions [0, length) of every (seq_id, length) pair,
  // creating sequences that are new. All or nothing: ResourceExhausted (and
  // no block taken) if the pool cannot hold them all.
  absl::Status Reserve(absl::Span<const std::pair<int64_t, int64_t>> needs);
  // Returns the sequence's blocks; unknown ids are ignored.
  void Free(int64_t seq_id);

  bool Has(int64_t seq_id) const { return seqs_.contains(seq_id); }
  // Positions reserved for the sequence (0 if unknown).
  int64_t Capacity(int64_t seq_id) const;
  // Positions of `layer` written so far (0 if unknown).
  int64_t Written(int64_t seq_id, int64_t layer) const;
  // Records that positions [0, length) of `layer` hold keys and values.
  void SetWritten(int64_t seq_id, int64_t layer, int64_t length);
  // The sequence's block table; the sequence must exist.
  const std::vector<int32_t>& BlockTable(int64_t seq_id) const;

  ops::PagedKvLayer Layer(int64_t layer) const;
  const CpuKvShape& shape() const { return shape_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    std::vector<int64_t> written;  // [num_layers]
  };

  CpuKvCache() = default;

  CpuKvShape shape_;
  int64_t num_blocks_ = 0;
  int64_t layer_elems_ = 0;  // floats of k (or v) per layer
  // Left uninitialised: only written slots are ever read.
  // [layers, blocks, ...]: a block is laid out as ops::PagedKvLayer says.
  HugePageArray k_, v_;
  std::vector<int32_t> free_;
  absl::flat_hash_map<int64_t, Sequence> seqs_;
};

}  // namespace tandem

#endif  // TANDEM_CPU_WORKER_KV_CPU_KV_CACHE_H_
