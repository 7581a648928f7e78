#include "cpu_worker/kv/cpu_kv_cache.h"

#include <algorithm>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

// 2^36 floats per tensor (256 GiB): anything larger is a mistake, and
// refusing it keeps the products below far from overflow.
constexpr int64_t kMaxElems = int64_t{1} << 36;

}  // namespace

absl::StatusOr<std::unique_ptr<CpuKvCache>> CpuKvCache::Create(const CpuKvShape& s) {
  if (s.num_layers <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 || s.block_size <= 0 ||
      s.capacity_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU KV cache dimensions must be positive: layers=", s.num_layers,
        " kv_heads=", s.kv_heads, " head_dim=", s.head_dim, " block_size=", s.block_size,
        " capacity=", s.capacity_tokens));
  }
  if (s.num_layers > (1 << 20) || s.kv_heads > (1 << 20) || s.head_dim > (1 << 20) ||
      s.block_size > (1 << 20) || s.capacity_tokens > (int64_t{1} << 36)) {
    return absl::ResourceExhaustedError("CPU KV cache dimensions are too large");
  }
  const int64_t blocks = (s.capacity_tokens + s.block_size - 1) / s.block_size;
  const int64_t row = s.kv_heads * s.head_dim;
  if (row > kMaxElems || blocks * s.block_size > kMaxElems / row ||
      blocks * s.block_size * row > kMaxElems / s.num_layers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CPU KV cache of ", s.capacity_tokens, " tokens x ", s.num_layers,
                     " layers x ", row, " floats is too large"));
  }
  if (blocks > std::numeric_limits<int32_t>::max()) {
    return absl::ResourceExhaustedError("CPU KV cache has too many blocks");
  }
  auto kv = std::unique_ptr<CpuKvCache>(new CpuKvCache());
  kv->shape_ = s;
  kv->num_blocks_ = blocks;
  kv->layer_elems_ = blocks * s.block_size * row;
  const size_t elems = static_cast<size_t>(kv->layer_elems_ * s.num_layers);
  TANDEM_ASSIGN_OR_RETURN(kv->k_, HugePageArray::Allocate(elems));
  TANDEM_ASSIGN_OR_RETURN(kv->v_, HugePageArray::Allocate(elems));
  kv->free_.reserve(static_cast<size_t>(blocks));
  // Hand out low block ids first.
  for (int64_t b = blocks - 1; b >= 0; --b) kv->free_.push_back(static_cast<int32_t>(b));
  return kv;
}

absl::Status CpuKvCache::Reserve(absl::Span<const std::pair<int64_t, int64_t>> needs) {
  // Blocks each sequence needs beyond what it holds; a sequence listed
  // twice needs the larger length.
  absl::flat_hash_map<int64_t, int64_t> want;
  for (const auto& [seq, length] : needs) {
    if (length < 0) return absl::InvalidArgumentError("negative KV length");
    int64_t& w = want[seq];
    w = std::max(w, length);
  }
  int64_t extra = 0;
  for (const auto& [seq, length] : want) {
    const int64_t need = (length + shape_.block_size - 1) / shape_.block_size;
    auto it = seqs_.find(seq);
    const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
    extra += std::max<int64_t>(0, need - have);
  }
  if (extra > free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "CPU KV cache full: ", extra, " more blocks of ", shape_.block_size, " tokens needed, ",
        free_blocks(), " free of ", num_blocks_));
  }
  for (const auto& [seq, length] : want) {
    Sequence& s = seqs_[seq];
    if (s.written.empty()) s.written.assign(static_cast<size_t>(shape_.num_layers), 0);
    const int64_t need = (length + shape_.block_size - 1) / shape_.block_size;
    while (static_cast<int64_t>(s.blocks.size()) < need) {
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
  }
  return absl::OkStatus();
}

void CpuKvCache::Free(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) free_.push_back(*b);
  seqs_.erase(it);
}

int64_t CpuKvCache::Capacity(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size()) * shape_.block_size;
}

int64_t CpuKvCache::Written(int64_t seq_id, int64_t layer) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || layer < 0 || layer >= shape_.num_layers) return 0;
  return it->second.written[static_cast<size_t>(layer)];
}

void CpuKvCache::SetWritten(int64_t seq_id, int64_t layer, int64_t length) {
  auto it = seqs_.find(seq_id);
  TANDEM_CHECK(it != seqs_.end() && layer >= 0 && layer < shape_.num_layers);
  TANDEM_CHECK(length >= 0 && length <= Capacity(seq_id));
  it->second.written[static_cast<size_t>(layer)] = length;
}

const std::vector<int32_t>& CpuKvCache::BlockTable(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  TANDEM_CHECK(it != seqs_.end());
  return it->second.blocks;
}

ops::PagedKvLayer CpuKvCache::Layer(int64_t layer) const {
  TANDEM_CHECK(layer >= 0 && layer < shape_.num_layers);
  ops::PagedKvLayer l;
  l.k = k_.data() + layer * layer_elems_;
  l.v = v_.data() + layer * layer_elems_;
  l.block_size = shape_.block_size;
  l.kv_heads = shape_.kv_heads;
  l.head_dim = shape_.head_dim;
  return l;
}

}  // namespace tandem
