// Which tokens of a vocabulary may come next under a JSON constraint: the
// vocabulary's bytes held once, and for a grammar state the bitmask that
// the gpu_worker's sampler takes (StepSequence.sampling.allowed_tokens).
//
// A token is allowed when all its bytes continue the JSON text (one a
// SchemaGrammar allows: any object for json_object, or a JSON Schema's); special
// tokens (chat markers and the like) and tokens of no bytes never are, and
// the end-of-generation ids are exactly when the text is complete. A state
// that nothing could follow still allows the end ids, so the request ends
// rather than the sampler having nothing to pick.
#ifndef TANDEM_COORDINATOR_STRUCTURED_TOKEN_MASK_H_
#define TANDEM_COORDINATOR_STRUCTURED_TOKEN_MASK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/structured/schema_grammar.h"

namespace tandem {
class Tokenizer;
}

namespace tandem::structured {

class TokenMasker {
 public:
  // token_bytes[i]: the bytes token i stands for; ids at or past its size,
  // and those marked `special`, are never allowed but as end ids.
  TokenMasker(int64_t vocab_size, std::vector<std::string> token_bytes, std::vector<bool> special,
              std::vector<int32_t> end_ids);
  // From a model's tokenizer (its vocabulary may be smaller than the
  // model's `vocab_size`: the extra ids are never allowed). The end ids are
  // the tokenizer's end-of-generation ids and `more_end_ids` (the model's
  // own, from its config).
  static absl::StatusOr<std::unique_ptr<TokenMasker>> FromTokenizer(
      const Tokenizer& tokenizer, int64_t vocab_size,
      const std::vector<int32_t>& more_end_ids = {});

  int64_t vocab_size() const { return vocab_size_; }
  // ceil(vocab_size / 8) bytes, bit i of byte i / 8 set for an allowed token.
  // The masks of the states asked for last are kept, kMaskCacheBytes of
  // them (within kMinCachedMasks and kMaxCachedMasks masks): an answer
  // spends most of its tokens in a few states (inside a string at some
  // depth, between values), whose masks then cost a copy, and requests
  // with the same schema (interned, schema_intern.h) share them.
  // Thread-safe; a mask is computed outside the cache's lock.
  std::string AllowedMask(const SchemaGrammar& state) const;
  // The masks of several states at once (a step's sequences), as
  // AllowedMask gives them: the states not in the cache are computed once
  // each (requests at the same state share it), on up to `threads` threads.
  std::vector<std::string> AllowedMasks(const std::vector<const SchemaGrammar*>& states,
                                        int threads) const;
  // The same, computed afresh (no cache): the vocabulary is walked in
  // byte order, so a prefix shared by many tokens is fed once, and the
  // tokens under a prefix that fails are skipped together.
  std::string ComputeMask(const SchemaGrammar& state) const;
  static constexpr size_t kMaskCacheBytes = size_t{8} << 20;
  static constexpr size_t kMinCachedMasks = 32;
  static constexpr size_t kMaxCachedMasks = 1024;
  size_t max_cached_masks() const { return max_cached_; }
  // AllowedMask's answers from the cache, and those computed.
  int64_t cache_hits() const;
  int64_t cache_misses() const;
  // The bytes of a sampled token (empty for a special or unknown id).
  const std::string& Bytes(int32_t id) const;
  bool IsEnd(int32_t id) const;

 private:
  struct Cached {
    std::string mask;
    int64_t used = 0;  // tick of its last use
  };

  int64_t vocab_size_;
  std::vector<std::string> bytes_;  // empty for special tokens
  std::vector<int32_t> end_ids_;
  // The ids of tokens with bytes, in byte order; common_[k]: how many
  // leading bytes order_[k] shares with order_[k - 1].
  std::vector<int32_t> order_;
  std::vector<uint32_t> common_;
  // Their bytes, one after another in that order (the walk reads them in
  // sequence rather than chasing one string per token): token k is
  // walk_bytes_[walk_offset_[k] .. walk_offset_[k + 1]).
  std::string walk_bytes_;
  std::vector<uint32_t> walk_offset_;
  // The depths along token k's bytes (past common_[k]) at which a later
  // token picks up: save_depths_[save_begin_[k] .. save_begin_[k + 1]),
  // ascending. Only these states are kept during the walk; the rest are
  // fed in place.
  std::vector<uint32_t> save_begin_;
  std::vector<uint32_t> save_depths_;
  size_t longest_ = 0;  // bytes of the longest token
  mutable absl::Mutex mu_;
  size_t max_cached_ = kMinCachedMasks;
  // By state; a kept state's schema may be gone (it is never read: states
  // compare by schema id, and ids are not reused).
  mutable absl::flat_hash_map<SchemaGrammar, Cached> cache_ ABSL_GUARDED_BY(mu_);
  mutable int64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_TOKEN_MASK_H_
