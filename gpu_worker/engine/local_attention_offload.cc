#include "gpu_worker/engine/local_attention_offload.h"

#include "common/status_macros.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<LocalAttentionOffload>> LocalAttentionOffload::Create(
    const CpuAttentionShape& shape) {
  auto o = std::unique_ptr<LocalAttentionOffload>(new LocalAttentionOffload());
  TANDEM_ASSIGN_OR_RETURN(o->attention_, CpuAttention::Create(shape));
  return o;
}

LocalAttentionOffload::~LocalAttentionOffload() {
  // The worker thread writes into the engine's buffers and reads the cache.
  if (pending_.valid()) pending_.wait();
}

absl::Status LocalAttentionOffload::Submit(int64_t layer, const std::vector<AttentionJob>& jobs) {
  if (pending_.valid()) {
    return absl::FailedPreconditionError("attention offload: Submit before the last Collect");
  }
  std::vector<CpuAttentionTask> tasks;
  tasks.reserve(jobs.size());
  for (const AttentionJob& j : jobs) {
    tasks.push_back({j.seq_id, j.start_pos, j.tokens, j.q, j.k, j.v, j.out});
  }
  CpuAttention* attention = attention_.get();
  pending_ = std::async(std::launch::async, [attention, layer, tasks = std::move(tasks)] {
    return attention->Run(layer, tasks);
  });
  return absl::OkStatus();
}

absl::Status LocalAttentionOffload::Collect(int64_t, const std::vector<AttentionJob>&) {
  if (!pending_.valid()) return absl::OkStatus();
  return pending_.get();
}

void LocalAttentionOffload::Free(int64_t seq_id) {
  // The engine frees only between steps, when nothing is in flight; wait
  // anyway so the cache is never touched from two threads.
  if (pending_.valid()) pending_.wait();
  attention_->Free(seq_id);
}

}  // namespace tandem
