// The BPE model: turns one pre-tokenized word into token ids.
//
// Two merge rules:
//  - ranked (tokenizer.json, GGUF "gpt2"): merge pairs from the merges list,
//    lowest rank first, leftmost on ties (HF tokenizers' Word::merge_all);
//  - scored (GGUF "llama", SentencePiece BPE as llama.cpp runs it): merge any
//    adjacent pair whose concatenation is a normal vocab token, highest token
//    score first, leftmost on ties.
// Characters missing from the vocab become <0xXX> byte tokens (byte
// fallback) or the unknown token. Results are cached per word.
#ifndef TANDEM_COMMON_TOKENIZER_BPE_H_
#define TANDEM_COMMON_TOKENIZER_BPE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tokenizer/vocab.h"

namespace tandem::tok {

struct BpeOptions {
  bool byte_fallback = false;
  int32_t unk_id = -1;  // -1: characters without a token are dropped
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is itself a token is not split
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  // Ranked merges; merges[i] has rank i. A merge naming a piece missing from
  // the vocab (or whose result is missing) is an InvalidArgument error unless
  // `skip_bad_merges`, in which case it is ignored.
  static absl::StatusOr<std::unique_ptr<BpeModel>> CreateRanked(
      const Vocab* vocab,
      const std::vector<std::pair<std::string, std::string>>& merges,
      BpeOptions options, bool skip_bad_merges);
  // Scored merges; scores[id] is the score of token id.
  static absl::StatusOr<std::unique_ptr<BpeModel>> CreateScored(
      const Vocab* vocab, std::vector<float> scores, BpeOptions options);

  // Appends the ids of `word` (valid UTF-8).
  void Tokenize(std::string_view word, std::vector<int32_t>* out) const;

  size_t num_merges() const { return merges_.size(); }
  size_t cache_size() const;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t begin, len;  // bytes of the word covered
  };

  explicit BpeModel(const Vocab* vocab, BpeOptions options);
  void Compute(std::string_view word, std::vector<int32_t>* out) const;
  void InitialSymbols(std::string_view word, std::vector<Symbol>* syms) const;
  void MergeRanked(std::vector<Symbol>* syms) const;
  void TokenizeScored(std::string_view word, std::vector<int32_t>* out) const;
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
           static_cast<uint32_t>(b);
  }

  const Vocab* vocab_;
  BpeOptions opt_;
  bool scored_ = false;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::vector<float> scores_;
  std::vector<int32_t> byte_ids_;  // <0xXX> ids

  static constexpr size_t kMaxCachedWordLen = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_BPE_H_
