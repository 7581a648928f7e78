#include "common/tokenizer/bpe.h"

#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/unicode.h"

namespace tandem::tok {

BpeModel::BpeModel(const Vocab* vocab, BpeOptions options)
    : vocab_(vocab),
      opt_(std::move(options)),
      byte_ids_(vocab->ByteTokenIds()) {}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::CreateRanked(
    const Vocab* vocab,
    const std::vector<std::pair<std::string, std::string>>& merges,
    BpeOptions options, bool skip_bad_merges) {
  auto m = std::unique_ptr<BpeModel>(new BpeModel(vocab, std::move(options)));
  m->merges_.reserve(merges.size());
  const size_t prefix_len = m->opt_.continuing_subword_prefix.size();
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t ia = vocab->FindInModel(a);
    const int32_t ib = vocab->FindInModel(b);
    joined.assign(a);
    if (prefix_len > 0 &&
        b.compare(0, prefix_len, m->opt_.continuing_subword_prefix) == 0) {
      joined.append(b, prefix_len, std::string::npos);
    } else {
      joined.append(b);
    }
    const int32_t inew = vocab->FindInModel(joined);
    if (ia < 0 || ib < 0 || inew < 0) {
      if (skip_bad_merges) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("merge #", rank, " '", a, " ", b,
                       "' uses a token missing from the vocab"));
    }
    m->merges_[Key(ia, ib)] = Merge{static_cast<int32_t>(rank), inew};
  }
  return m;
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::CreateScored(
    const Vocab* vocab, std::vector<float> scores, BpeOptions options) {
  if (static_cast<int64_t>(scores.size()) != vocab->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "have ", scores.size(), " scores for ", vocab->size(), " tokens"));
  }
  auto m = std::unique_ptr<BpeModel>(new BpeModel(vocab, std::move(options)));
  m->scored_ = true;
  m->scores_ = std::move(scores);
  return m;
}

size_t BpeModel::cache_size() const {
  absl::ReaderMutexLock lock(&mu_);
  return cache_.size();
}

void BpeModel::Tokenize(std::string_view word,
                        std::vector<int32_t>* out) const {
  if (word.empty()) return;
  const bool cacheable = word.size() <= kMaxCachedWordLen;
  const absl::string_view key(word.data(), word.size());
  if (cacheable) {
    absl::ReaderMutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  Compute(word, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    absl::MutexLock lock(&mu_);
    if (cache_.size() < kMaxCacheEntries)
      cache_.try_emplace(key, std::move(ids));
  }
}

void BpeModel::Compute(std::string_view word, std::vector<int32_t>* out) const {
  if (scored_) {
    TokenizeScored(word, out);
    return;
  }
  if (opt_.ignore_merges) {
    const int32_t id = vocab_->FindInModel(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<Symbol> syms;
  InitialSymbols(word, &syms);
  MergeRanked(&syms);
  for (const Symbol& s : syms) {
    if (s.len > 0) out->push_back(s.id);
  }
}

// HF tokenizers' BPE::merge_word: one symbol per character (with the
// continuing-subword prefix / end-of-word suffix), byte fallback or <unk>.
void BpeModel::InitialSymbols(std::string_view word,
                              std::vector<Symbol>* syms) const {
  syms->reserve(word.size());
  auto add = [&](int32_t id, size_t begin, size_t len) {
    const int32_t idx = static_cast<int32_t>(syms->size());
    syms->push_back(Symbol{id, idx - 1, -1, static_cast<uint32_t>(begin),
                           static_cast<uint32_t>(len)});
    if (idx > 0) (*syms)[idx - 1].next = idx;
  };
  int32_t unk_begin = -1;
  size_t unk_len = 0;
  auto flush_unk = [&]() {
    if (unk_begin >= 0) add(opt_.unk_id, unk_begin, unk_len);
    unk_begin = -1;
  };
  std::string s;
  size_t i = 0;
  while (i < word.size()) {
    const size_t len = CharLenAt(word, i);
    const bool is_first = i == 0;
    const bool is_last = i + len == word.size();
    std::string_view piece = word.substr(i, len);
    if ((!is_first && !opt_.continuing_subword_prefix.empty()) ||
        (is_last && !opt_.end_of_word_suffix.empty())) {
      s.clear();
      if (!is_first) s += opt_.continuing_subword_prefix;
      s.append(piece.data(), piece.size());
      if (is_last) s += opt_.end_of_word_suffix;
      piece = s;
    }
    const int32_t id = vocab_->FindInModel(piece);
    if (id >= 0) {
      flush_unk();
      add(id, i, len);
    } else {
      bool done = false;
      if (opt_.byte_fallback) {
        bool all = true;
        for (char c : piece)
          all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
        if (all) {
          flush_unk();
          for (size_t k = 0; k < piece.size(); ++k) {
            add(byte_ids_[static_cast<uint8_t>(piece[k])], i + k, 1);
          }
          done = true;
        }
      }
      if (!done && opt_.unk_id >= 0) {
        if (unk_begin >= 0 && opt_.fuse_unk) {
          unk_len += len;
        } else {
          flush_unk();
          unk_begin = static_cast<int32_t>(i);
          unk_len = len;
        }
      }
    }
    i += len;
  }
  flush_unk();
}

// HF tokenizers' Word::merge_all (without dropout).
void BpeModel::MergeRanked(std::vector<Symbol>* syms_ptr) const {
  std::vector<Symbol>& syms = *syms_ptr;
  if (syms.size() < 2) return;
  struct Item {
    int32_t rank, pos, new_id;
    bool operator<(
        const Item& o) const {  // reversed: std::priority_queue is a max-heap
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Item> storage;
  storage.reserve(syms.size() * 2);
  std::priority_queue<Item> queue(std::less<Item>(), std::move(storage));
  auto find = [&](int32_t a, int32_t b) -> const Merge* {
    auto it = merges_.find(Key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    if (const Merge* m = find(syms[i].id, syms[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Item top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = syms[next_pos];
    const Merge* m = find(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    syms[next_pos].len = 0;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* pm = find(syms[cur.prev].id, cur.id)) {
        queue.push({pm->rank, cur.prev, pm->new_id});
      }
    }
    if (cur.next >= 0) {
      if (const Merge* nm = find(cur.id, syms[cur.next].id)) {
        queue.push({nm->rank, top.pos, nm->new_id});
      }
    }
  }
}

// llama.cpp's llm_tokenizer_spm_session::tokenize.
void BpeModel::TokenizeScored(std::string_view word,
                              std::vector<int32_t>* out) const {
  std::vector<Symbol> syms;
  size_t i = 0;
  while (i < word.size()) {
    const size_t len = CharLenAt(word, i);
    const int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{-1, idx - 1, -1, static_cast<uint32_t>(i),
                          static_cast<uint32_t>(len)});
    if (idx > 0) syms[idx - 1].next = idx;
    i += len;
  }
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    bool operator<(const Bigram& o) const {  // max score first, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = syms[left].len + syms[right].len;
    const int32_t id = vocab_->FindInModel(word.substr(syms[left].begin, size));
    if (id < 0 || vocab_->Kind(id) != TokenKind::kNormal) return;
    queue.push({scores_[id], left, right, size});
  };
  for (size_t k = 1; k < syms.size(); ++k)
    try_add(static_cast<int32_t>(k - 1), static_cast<int32_t>(k));
  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& left = syms[bg.left];
    Symbol& right = syms[bg.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != bg.size)
      continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = bg.left;
    try_add(left.prev, bg.left);
    try_add(bg.left, left.next);
  }
  for (const Symbol& s : syms) {
    if (s.len == 0) continue;
    const std::string_view text = word.substr(s.begin, s.len);
    const int32_t id = vocab_->FindInModel(text);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : text) {  // no token: byte tokens, else <unk>
      const int32_t b = byte_ids_[static_cast<uint8_t>(c)];
      if (b >= 0) {
        out->push_back(b);
      } else if (opt_.unk_id >= 0) {
        out->push_back(opt_.unk_id);
        break;
      }
    }
  }
}

}  // namespace tandem::tok
