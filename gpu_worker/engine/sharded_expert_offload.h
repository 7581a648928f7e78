// Routed experts spread over several cpu_workers (`tandem serve
// --cpu-workers K`): expert e of every layer belongs to shard e % K, each
// shard an ExpertOffload of its own (one cpu_worker process, one ring pair).
// A layer's jobs are split by shard, submitted to every shard before any is
// collected, so the cpu_workers compute at once.
#ifndef TANDEM_GPU_WORKER_ENGINE_SHARDED_EXPERT_OFFLOAD_H_
#define TANDEM_GPU_WORKER_ENGINE_SHARDED_EXPERT_OFFLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu_worker/engine/expert_offload.h"

namespace tandem {

// The shard that computes expert `expert` among `num_shards` cpu_workers.
inline int64_t ExpertShard(int64_t expert, int64_t num_shards) { return expert % num_shards; }
// The ring name prefix of shard `shard`: the prefix itself for one shard (so
// a single cpu_worker keeps the plain names), "<prefix>-s<shard>" otherwise.
std::string ShardRingPrefix(const std::string& prefix, int64_t shard, int64_t num_shards);
// remote[layer] restricted to the experts of `shard`.
std::vector<std::vector<int32_t>> ShardExperts(const std::vector<std::vector<int32_t>>& remote,
                                               int64_t shard, int64_t num_shards);

class ShardedExpertOffload : public ExpertOffload {
 public:
  // shards[i] computes the experts e with ExpertShard(e, shards.size()) == i.
  static absl::StatusOr<std::unique_ptr<ShardedExpertOffload>> Create(
      std::vector<std::unique_ptr<ExpertOffload>> shards);

  bool IsRemote(int64_t layer, int64_t expert) const override;
  absl::Status Submit(int64_t layer, const std::vector<ExpertJob>& jobs) override;
  absl::Status Collect(int64_t layer, const std::vector<ExpertJob>& jobs) override;

 private:
  explicit ShardedExpertOffload(std::vector<std::unique_ptr<ExpertOffload>> shards);
  ExpertOffload& ShardOf(int64_t expert) const;

  std::vector<std::unique_ptr<ExpertOffload>> shards_;
  std::vector<std::vector<ExpertJob>> pending_;  // per shard, from Submit to Collect
  std::vector<bool> submitted_;                  // per shard: has jobs this layer
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_SHARDED_EXPERT_OFFLOAD_H_
