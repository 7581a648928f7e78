#include "gpu_worker/engine/sharded_expert_offload.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem {

std::string ShardRingPrefix(const std::string& prefix, int64_t shard, int64_t num_shards) {
  return num_shards <= 1 ? prefix : absl::StrCat(prefix, "-s", shard);
}

std::vector<std::vector<int32_t>> ShardExperts(const std::vector<std::vector<int32_t>>& remote,
                                               int64_t shard, int64_t num_shards) {
  std::vector<std::vector<int32_t>> out(remote.size());
  for (size_t l = 0; l < remote.size(); ++l) {
    for (int32_t e : remote[l]) {
      if (ExpertShard(e, num_shards) == shard) out[l].push_back(e);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ShardedExpertOffload>> ShardedExpertOffload::Create(
    std::vector<std::unique_ptr<ExpertOffload>> shards) {
  if (shards.empty()) return absl::InvalidArgumentError("ShardedExpertOffload: no shards");
  for (const auto& s : shards) {
    if (s == nullptr) return absl::InvalidArgumentError("ShardedExpertOffload: a null shard");
  }
  return std::unique_ptr<ShardedExpertOffload>(new ShardedExpertOffload(std::move(shards)));
}

ShardedExpertOffload::ShardedExpertOffload(std::vector<std::unique_ptr<ExpertOffload>> shards)
    : shards_(std::move(shards)), pending_(shards_.size()), submitted_(shards_.size(), false) {}

ExpertOffload& ShardedExpertOffload::ShardOf(int64_t expert) const {
  return *shards_[static_cast<size_t>(ExpertShard(expert, static_cast<int64_t>(shards_.size())))];
}

bool ShardedExpertOffload::IsRemote(int64_t layer, int64_t expert) const {
  return expert >= 0 && ShardOf(expert).IsRemote(layer, expert);
}

absl::Status ShardedExpertOffload::Submit(int64_t layer, const std::vector<ExpertJob>& jobs) {
  const auto n = static_cast<int64_t>(shards_.size());
  for (auto& p : pending_) p.clear();
  for (const ExpertJob& j : jobs) {
    if (j.expert < 0) {
      return absl::InvalidArgumentError(absl::StrCat("expert ", j.expert, " is negative"));
    }
    pending_[static_cast<size_t>(ExpertShard(j.expert, n))].push_back(j);
  }
  // Every shard starts before any is waited on.
  absl::Status first_error;
  for (size_t i = 0; i < shards_.size(); ++i) {
    submitted_[i] = !pending_[i].empty();
    if (!submitted_[i]) continue;
    absl::Status s = shards_[i]->Submit(layer, pending_[i]);
    if (!s.ok()) {
      submitted_[i] = false;
      if (first_error.ok()) first_error = s;
    }
  }
  if (first_error.ok()) return absl::OkStatus();
  // Drain the shards that did start, so that none is left mid-layer.
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (submitted_[i]) (void)shards_[i]->Collect(layer, pending_[i]);
    submitted_[i] = false;
  }
  return first_error;
}

absl::Status ShardedExpertOffload::Collect(int64_t layer, const std::vector<ExpertJob>&) {
  absl::Status first_error;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!submitted_[i]) continue;
    submitted_[i] = false;
    absl::Status s = shards_[i]->Collect(layer, pending_[i]);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  return first_error;
}

}  // namespace tandem
