// An AttentionOffload that holds the CPU KV cache in this process and
// computes on a thread of its own with the cpu_worker's own attention code
// (CpuAttention): the reference the cross-process offload is tested
// against, a test of the engine's submit/compute/collect order, and what
// `tandem generate --cpu-attention local` runs.
#ifndef TANDEM_GPU_WORKER_ENGINE_LOCAL_ATTENTION_OFFLOAD_H_
#define TANDEM_GPU_WORKER_ENGINE_LOCAL_ATTENTION_OFFLOAD_H_

#include <future>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cpu_worker/kv/cpu_attention.h"
#include "gpu_worker/engine/attention_offload.h"

namespace tandem {

class LocalAttentionOffload : public AttentionOffload {
 public:
  static absl::StatusOr<std::unique_ptr<LocalAttentionOffload>> Create(
      const CpuAttentionShape& shape);
  ~LocalAttentionOffload() override;

  absl::Status Submit(int64_t layer, const std::vector<AttentionJob>& jobs) override;
  absl::Status Collect(int64_t layer, const std::vector<AttentionJob>& jobs) override;
  void Free(int64_t seq_id) override;

  // The cache, for tests (do not call while a Submit is outstanding).
  const CpuKvCache& cache() const { return attention_->cache(); }

 private:
  LocalAttentionOffload() = default;
  std::unique_ptr<CpuAttention> attention_;
  std::future<absl::Status> pending_;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_LOCAL_ATTENTION_OFFLOAD_H_
