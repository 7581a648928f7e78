// The content index behind prefix caching (vLLM's automatic prefix caching):
// which KV blocks hold which full blocks of tokens, so that a request whose
// prompt starts like an earlier one reuses that one's KV instead of
// recomputing it.
//
// A cached block is named by its tokens and by the block before it in the
// sequence: the key is (parent uid, tokens), where a uid is a number given to
// each registration and never reused. The KV of a block depends on every
// token before it, and by induction a key pins the whole prefix exactly: no
// hash of the prefix is trusted, so two prompts never share KV by collision,
// and a parent evicted and refilled with other tokens gets a new uid, which
// orphans its old children (they are then found by nobody and age out).
//
// Blocks no request holds stay indexed while they wait, least recently freed
// first, to be taken back for new KV (the LRU list here).
#ifndef TANDEM_COORDINATOR_SCHEDULER_PREFIX_CACHE_H_
#define TANDEM_COORDINATOR_SCHEDULER_PREFIX_CACHE_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tandem::sched {

class PrefixCache {
 public:
  // The parent uid of a sequence's first block.
  static constexpr uint64_t kRoot = 0;

  explicit PrefixCache(int64_t num_blocks = 0);

  // The block holding `tokens` right after the block `parent`, or -1.
  int32_t Find(uint64_t parent, absl::Span<const int32_t> tokens) const;
  // The uid of a cached block; kRoot (0) when the block is not indexed.
  uint64_t UidOf(int32_t block) const { return uid_[static_cast<size_t>(block)]; }
  bool IsCached(int32_t block) const { return UidOf(block) != kRoot; }

  // Indexes `block` as holding `tokens` after `parent` and returns its uid.
  // When another block already holds that key, `block` stays unindexed and
  // that block's uid is returned: the chain goes on from the copy everyone
  // can find.
  uint64_t Insert(int32_t block, uint64_t parent, absl::Span<const int32_t> tokens);
  // Unindexes a cached block (it is about to hold other KV).
  void Erase(int32_t block);

  // The LRU list of cached blocks no request holds.
  void PushFree(int32_t block);    // newest at the back
  void RemoveFree(int32_t block);  // taken back by a request that matched it
  bool IsFree(int32_t block) const { return lru_tick_[static_cast<size_t>(block)] >= 0; }
  int32_t PopOldestFree();  // unindexed too; the list must not be empty
  int64_t num_free() const { return static_cast<int64_t>(lru_.size()); }
  int64_t num_cached() const { return static_cast<int64_t>(index_.size()); }

  // Unindexes everything (the workers' KV is gone). Returns the blocks that
  // were in the LRU list, oldest first, for the caller to free.
  std::vector<int32_t> Clear();

  // Every indexed block's key finds it, every LRU entry is indexed.
  absl::Status CheckInvariants() const;

 private:
  using Key = std::pair<uint64_t, std::vector<int32_t>>;

  absl::flat_hash_map<Key, int32_t> index_;
  std::vector<Key> key_;            // [num_blocks] the key of an indexed block
  std::vector<uint64_t> uid_;       // [num_blocks] kRoot: not indexed
  std::vector<int64_t> lru_tick_;   // [num_blocks] -1: not in the LRU list
  std::map<int64_t, int32_t> lru_;  // tick -> block, oldest first
  uint64_t next_uid_ = kRoot + 1;
  int64_t next_tick_ = 0;
};

}  // namespace tandem::sched

#endif  // TANDEM_COORDINATOR_SCHEDULER_PREFIX_CACHE_H_
