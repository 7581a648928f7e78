#include "coordinator/scheduler/prefix_cache.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::sched {

PrefixCache::PrefixCache(int64_t num_blocks)
    : key_(static_cast<size_t>(num_blocks)),
      uid_(static_cast<size_t>(num_blocks), kRoot),
      lru_tick_(static_cast<size_t>(num_blocks), -1) {}

int32_t PrefixCache::Find(uint64_t parent, absl::Span<const int32_t> tokens) const {
  auto it = index_.find(Key(parent, std::vector<int32_t>(tokens.begin(), tokens.end())));
  return it == index_.end() ? -1 : it->second;
}

uint64_t PrefixCache::Insert(int32_t block, uint64_t parent, absl::Span<const int32_t> tokens) {
  TANDEM_CHECK(!IsCached(block));
  Key key(parent, std::vector<int32_t>(tokens.begin(), tokens.end()));
  auto [it, inserted] = index_.try_emplace(key, block);
  if (!inserted) return UidOf(it->second);
  const size_t b = static_cast<size_t>(block);
  key_[b] = std::move(key);
  uid_[b] = next_uid_++;
  return uid_[b];
}

void PrefixCache::Erase(int32_t block) {
  const size_t b = static_cast<size_t>(block);
  TANDEM_CHECK(IsCached(block) && !IsFree(block));
  index_.erase(key_[b]);
  key_[b] = Key();
  uid_[b] = kRoot;
}

void PrefixCache::PushFree(int32_t block) {
  TANDEM_CHECK(IsCached(block) && !IsFree(block));
  lru_tick_[static_cast<size_t>(block)] = next_tick_;
  lru_.emplace(next_tick_++, block);
}

void PrefixCache::RemoveFree(int32_t block) {
  TANDEM_CHECK(IsFree(block));
  int64_t& tick = lru_tick_[static_cast<size_t>(block)];
  lru_.erase(tick);
  tick = -1;
}

int32_t PrefixCache::PopOldestFree() {
  TANDEM_CHECK(!lru_.empty());
  const int32_t block = lru_.begin()->second;
  RemoveFree(block);
  Erase(block);
  return block;
}

std::vector<int32_t> PrefixCache::Clear() {
  std::vector<int32_t> freed;
  freed.reserve(lru_.size());
  for (const auto& [tick, block] : lru_) freed.push_back(block);
  index_.clear();
  lru_.clear();
  for (Key& k : key_) k = Key();
  for (uint64_t& u : uid_) u = kRoot;
  for (int64_t& t : lru_tick_) t = -1;
  return freed;
}

absl::Status PrefixCache::CheckInvariants() const {
  int64_t indexed = 0;
  for (size_t b = 0; b < uid_.size(); ++b) {
    const int32_t block = static_cast<int32_t>(b);
    if (IsFree(block)) {
      auto it = lru_.find(lru_tick_[b]);
      if (it == lru_.end() || it->second != block || !IsCached(block)) {
        return absl::InternalError(absl::StrCat("prefix cache: block ", b, " bad in the LRU list"));
      }
    }
    if (!IsCached(block)) continue;
    ++indexed;
    auto it = index_.find(key_[b]);
    if (it == index_.end() || it->second != block) {
      return absl::InternalError(absl::StrCat("prefix cache: block ", b, "'s key finds another"));
    }
  }
  if (indexed != num_cached()) {
    return absl::InternalError(
        absl::StrCat("prefix cache: ", num_cached(), " keys for ", indexed, " indexed blocks"));
  }
  for (const auto& [tick, block] : lru_) {
    if (lru_tick_[static_cast<size_t>(block)] != tick) {
      return absl::InternalError(absl::StrCat("prefix cache: LRU entry of block ", block));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::sched
