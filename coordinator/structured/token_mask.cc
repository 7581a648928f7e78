#include "coordinator/structured/token_mask.h"

#include <algorithm>
#include <atomic>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_parts.h"

namespace tandem::structured {

TokenMasker::TokenMasker(int64_t vocab_size, std::vector<std::string> token_bytes,
                         std::vector<bool> special, std::vector<int32_t> end_ids)
    : vocab_size_(vocab_size), bytes_(std::move(token_bytes)), end_ids_(std::move(end_ids)) {
  max_cached_ = std::clamp<size_t>(kMaskCacheBytes / static_cast<size_t>((vocab_size_ + 7) / 8 + 1),
                                   kMinCachedMasks, kMaxCachedMasks);
  if (static_cast<int64_t>(bytes_.size()) > vocab_size_)
    bytes_.resize(static_cast<size_t>(vocab_size_));
  for (size_t i = 0; i < bytes_.size() && i < special.size(); ++i) {
    if (special[i]) bytes_[i].clear();
  }
  for (int32_t id : end_ids_) {
    if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) bytes_[static_cast<size_t>(id)].clear();
  }
  end_ids_.erase(std::remove_if(end_ids_.begin(), end_ids_.end(),
                                [&](int32_t id) { return id < 0 || id >= vocab_size_; }),
                 end_ids_.end());
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!bytes_[i].empty()) order_.push_back(static_cast<int32_t>(i));
  }
  std::sort(order_.begin(), order_.end(),
            [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  common_.resize(order_.size(), 0);
  for (size_t k = 0; k < order_.size(); ++k) {
    const std::string& t = bytes_[size_t(order_[k])];
    longest_ = std::max(longest_, t.size());
    if (k == 0) continue;
    const std::string& prev = bytes_[size_t(order_[k - 1])];
    size_t c = 0;
    while (c < t.size() && c < prev.size() && t[c] == prev[c]) ++c;
    common_[k] = static_cast<uint32_t>(c);
  }
  // A later token j picks up from token k's bytes at depth common_[j] when
  // every token between shares at least that much: the running minima of
  // common_ after k, while they are deeper than where k itself picked up.
  save_begin_.reserve(order_.size() + 1);
  for (size_t k = 0; k < order_.size(); ++k) {
    save_begin_.push_back(static_cast<uint32_t>(save_depths_.size()));
    const size_t len = bytes_[size_t(order_[k])].size();
    const size_t first = save_depths_.size();
    uint32_t least = ~uint32_t{0};
    for (size_t j = k + 1; j < order_.size() && common_[j] > common_[k]; ++j) {
      if (common_[j] < least) {
        least = common_[j];
        if (least <= len) save_depths_.push_back(least);
      }
    }
    std::reverse(save_depths_.begin() + static_cast<std::ptrdiff_t>(first), save_depths_.end());
  }
  save_begin_.push_back(static_cast<uint32_t>(save_depths_.size()));
  walk_offset_.reserve(order_.size() + 1);
  for (int32_t id : order_) {
    walk_offset_.push_back(static_cast<uint32_t>(walk_bytes_.size()));
    walk_bytes_ += bytes_[size_t(id)];
  }
  walk_offset_.push_back(static_cast<uint32_t>(walk_bytes_.size()));
}

absl::StatusOr<std::unique_ptr<TokenMasker>> TokenMasker::FromTokenizer(
    const Tokenizer& t, int64_t vocab_size, const std::vector<int32_t>& more_end_ids) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size must be > 0, got ", vocab_size));
  }
  std::vector<int32_t> end_ids = t.eos_ids();
  for (int32_t id : more_end_ids) {
    if (std::find(end_ids.begin(), end_ids.end(), id) == end_ids.end()) end_ids.push_back(id);
  }
  if (end_ids.empty()) {
    return absl::FailedPreconditionError(
        "the tokenizer names no end-of-generation token: a constrained answer could not end");
  }
  const int64_t n = std::min<int64_t>(t.vocab_size(), vocab_size);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> special(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    special[static_cast<size_t>(i)] = t.IsSpecial(id);
    bytes[static_cast<size_t>(i)] = std::string(t.parts().decoder.TokenBytes(id));
  }
  return std::make_unique<TokenMasker>(vocab_size, std::move(bytes), std::move(special),
                                       std::move(end_ids));
}

std::string TokenMasker::AllowedMask(const SchemaGrammar& state) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(state);
    if (it != cache_.end()) {
      it->second.used = ++tick_;
      ++hits_;
      return it->second.mask;
    }
  }
  // Computed without the lock, so other requests' hits do not wait for it.
  std::string mask = ComputeMask(state);
  absl::MutexLock lock(&mu_);
  ++misses_;
  auto [it, inserted] = cache_.try_emplace(state);
  it->second.used = ++tick_;
  if (!inserted) return mask;  // another thread computed it meanwhile
  it->second.mask = mask;
  if (cache_.size() > max_cached_) {
    // The least recently used goes: a scan, but only on a miss, which has
    // just cost a walk over the whole vocabulary.
    auto oldest = cache_.end();
    for (auto c = cache_.begin(); c != cache_.end(); ++c) {
      if (oldest == cache_.end() || c->second.used < oldest->second.used) oldest = c;
    }
    cache_.erase(oldest);
  }
  return mask;
}

std::vector<std::string> TokenMasker::AllowedMasks(const std::vector<const SchemaGrammar*>& states,
                                                   int threads) const {
  std::vector<std::string> out(states.size());
  // The states to compute, each once: index into `states` of the first
  // asking for it, and of the others.
  std::vector<size_t> fresh;
  std::vector<std::pair<size_t, size_t>> copies;  // (asking, first)
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_map<SchemaGrammar, size_t> first;
    for (size_t i = 0; i < states.size(); ++i) {
      auto it = cache_.find(*states[i]);
      if (it != cache_.end()) {
        it->second.used = ++tick_;
        ++hits_;
        out[i] = it->second.mask;
        continue;
      }
      auto [f, inserted] = first.try_emplace(*states[i], i);
      if (inserted) {
        fresh.push_back(i);
      } else {
        copies.emplace_back(i, f->second);
        ++hits_;  // given as another's, not computed
      }
    }
  }
  // Without the lock, on threads of their own when there are several.
  const size_t workers = std::min<size_t>(fresh.size(), static_cast<size_t>(std::max(threads, 1)));
  if (workers <= 1) {
    for (size_t i : fresh) out[i] = AllowedMask(*states[i]);
  } else {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k = next++; k < fresh.size(); k = next++) {
        out[fresh[k]] = AllowedMask(*states[fresh[k]]);
      }
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < workers; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  }
  for (const auto& [asking, first] : copies) out[asking] = out[first];
  return out;
}

int64_t TokenMasker::cache_hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

int64_t TokenMasker::cache_misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

std::string TokenMasker::ComputeMask(const SchemaGrammar& state) const {
  std::string mask(static_cast<size_t>((vocab_size_ + 7) / 8), '\0');
  auto allow = [&](int64_t id) {
    mask[static_cast<size_t>(id / 8)] |= static_cast<char>(1 << (id % 8));
  };
  bool any = false;
  // saved[d]: the state after the first d bytes of the token at hand, for
  // the depths a later token picks up from. cur: the state being fed; after
  // a token that fits, the state after all its bytes (at_end). dead: the
  // byte of the last token that failed (npos: none).
  constexpr size_t npos = ~size_t{0};
  std::vector<SchemaGrammar> saved(longest_ + 1, state);
  SchemaGrammar cur = state;
  size_t at_end = 0, dead = npos;
  for (size_t k = 0; k < order_.size(); ++k) {
    const size_t common = common_[k];
    if (dead != npos && common > dead) continue;  // it starts with the prefix that failed
    const std::string_view t(walk_bytes_.data() + walk_offset_[k],
                             walk_offset_[k + 1] - walk_offset_[k]);
    dead = npos;
    if (at_end != common) cur = saved[common];
    const uint32_t* save = save_depths_.data() + save_begin_[k];
    const uint32_t* const save_end = save_depths_.data() + save_begin_[k + 1];
    size_t d = common;
    for (; d < t.size(); ++d) {
      if (save != save_end && *save == d) {
        saved[d] = cur;
        ++save;
      }
      if (!cur.Feed(static_cast<uint8_t>(t[d]))) {
        dead = d;
        break;
      }
    }
    if (dead != npos) {
      at_end = npos;
      continue;
    }
    if (save != save_end && *save == d) saved[d] = cur;
    at_end = d;
    allow(order_[k]);
    any = true;
  }
  if (state.IsComplete() || !any) {
    for (int32_t id : end_ids_) allow(id);
  }
  return mask;
}

const std::string& TokenMasker::Bytes(int32_t id) const {
  static const std::string kNone;
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return kNone;
  return bytes_[static_cast<size_t>(id)];
}

bool TokenMasker::IsEnd(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

}  // namespace tandem::structured
