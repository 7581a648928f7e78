#include "gpu_worker/engine/kv_cache.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(int64_t num_layers, int64_t kv_heads,
                                                         int64_t head_dim, int64_t num_blocks,
                                                         int64_t block_size,
                                                         Device* device) {
  if (num_layers <= 0 || kv_heads <= 0 || head_dim <= 0 || num_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache dimensions must be positive: layers=", num_layers, " kv_heads=", kv_heads,
        " head_dim=", head_dim, " blocks=", num_blocks, " block_size=", block_size));
  }
  const int64_t elems = num_layers * num_blocks * block_size * kv_heads * head_dim;
  if (elems > (int64_t{1} << 36)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache of ", elems * 8, " bytes is too large"));
  }
  auto kv = std::unique_ptr<KvCache>(new KvCache());
  kv->num_layers_ = num_layers;
  kv->kv_heads_ = kv_heads;
  kv->head_dim_ = head_dim;
  kv->num_blocks_ = num_blocks;
  kv->block_size_ = block_size;
  if (device != nullptr) {
    const size_t bytes = static_cast<size_t>(elems) * sizeof(float);
    TANDEM_ASSIGN_OR_RETURN(kv->dev_k_, device->Allocate(bytes));
    TANDEM_ASSIGN_OR_RETURN(kv->dev_v_, device->Allocate(bytes));
    kv->k_ = static_cast<float*>(kv->dev_k_->data());
    kv->v_ = static_cast<float*>(kv->dev_v_->data());
  } else {
    TANDEM_ASSIGN_OR_RETURN(kv->host_k_, HugePageArray::Allocate(static_cast<size_t>(elems)));
    TANDEM_ASSIGN_OR_RETURN(kv->host_v_, HugePageArray::Allocate(static_cast<size_t>(elems)));
    kv->k_ = kv->host_k_.data();
    kv->v_ = kv->host_v_.data();
  }
  kv->free_.reserve(static_cast<size_t>(num_blocks));
  // Hand out low block ids first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) kv->free_.push_back(static_cast<int32_t>(b));
  return kv;
}

absl::Status KvCache::Reserve(int64_t seq_id, int64_t new_length) {
  if (!adopted_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", seq_id, " has no block table, but this KV cache follows the tables of ",
        adopted_.size(), " other sequences"));
  }
  auto& table = seqs_[seq_id];
  const int64_t need = (new_length + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(table.size());
  if (need <= have) return absl::OkStatus();
  if (need - have > free_blocks()) {
    if (table.empty()) seqs_.erase(seq_id);
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache full: sequence ", seq_id, " needs ", need - have,
                     " more blocks of ", block_size_, " tokens, ", free_.size(), " free"));
  }
  for (int64_t i = have; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

absl::Status KvCache::Adopt(int64_t seq_id, absl::Span<const int32_t> table, int64_t new_length) {
  if (static_cast<int64_t>(free_.size()) != num_blocks_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", seq_id, " comes with a block table, but this KV cache has allocated ",
        num_blocks_ - static_cast<int64_t>(free_.size()), " blocks itself"));
  }
  const int64_t need = (new_length + block_size_ - 1) / block_size_;
  if (static_cast<int64_t>(table.size()) < need) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq_id, "'s block table has ",
                                                   table.size(), " blocks; ", new_length,
                                                   " positions need ", need));
  }
  absl::flat_hash_set<int32_t> seen;
  for (int32_t b : table) {
    if (b < 0 || b >= num_blocks_) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", seq_id,
                                                     "'s block table names block ", b,
                                                     ", outside the cache's ", num_blocks_));
    }
    if (!seen.insert(b).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", seq_id, "'s block table lists block ", b, " twice"));
    }
  }
  seqs_[seq_id].assign(table.begin(), table.end());
  adopted_.insert(seq_id);
  return absl::OkStatus();
}

void KvCache::Free(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  if (adopted_.erase(seq_id) > 0) {  // the caller's blocks: nothing to return
    seqs_.erase(it);
    return;
  }
  for (auto it2 = it->second.rbegin(); it2 != it->second.rend(); ++it2) free_.push_back(*it2);
  seqs_.erase(it);
}

int64_t KvCache::Capacity(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.size()) * block_size_;
}

const std::vector<int32_t>& KvCache::BlockTable(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  TANDEM_CHECK(it != seqs_.end());
  return it->second;
}

ops::PagedKvLayer KvCache::Layer(int64_t layer) const {
  TANDEM_CHECK(layer >= 0 && layer < num_layers_);
  const int64_t per_layer = num_blocks_ * block_size_ * kv_heads_ * head_dim_;
  ops::PagedKvLayer l;
  l.k = k_ + layer * per_layer;
  l.v = v_ + layer * per_layer;
  l.block_size = block_size_;
  l.kv_heads = kv_heads_;
  l.head_dim = head_dim_;
  return l;
}

}  // namespace tandem
