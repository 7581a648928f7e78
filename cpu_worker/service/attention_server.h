// The cpu_worker's attention service (Neo): owns the CPU KV cache of the
// gpu_worker's cpu_attention sequences and computes their attention, layer
// by layer, request by request, over the attention ring pair
// (<prefix>-attn-req / <prefix>-attn-rep; format in common/shm/attention_wire.h).
//
// The cache is allocated by the session's first request (kConfigure), with
// the shape the gpu_worker sends: the cpu_worker needs no KV settings of its
// own beyond an optional upper bound, and a shape that does not match the
// model it was started with is refused before any step runs.
#ifndef TANDEM_CPU_WORKER_SERVICE_ATTENTION_SERVER_H_
#define TANDEM_CPU_WORKER_SERVICE_ATTENTION_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model_config.h"
#include "common/shm/slot_ring.h"
#include "cpu_worker/kv/cpu_attention.h"

namespace tandem {
namespace wire {
struct AttentionRequestHeader;
}  // namespace wire

class AttentionServer {
 public:
  // `config`: the model whose attention is served (request shapes are
  // checked against it). `max_kv_tokens`: the most KV tokens a gpu_worker
  // may ask for (0: no limit of ours).
  static absl::StatusOr<std::unique_ptr<AttentionServer>> Create(const ModelConfig& config,
                                                                 int64_t max_kv_tokens);

  // Handles one request into `reply` (a ring slot); returns the reply size.
  // Malformed or mismatched requests, capacity exhaustion and attend before
  // configure get an error reply (with the matching status code).
  int64_t Handle(absl::Span<const uint8_t> request, absl::Span<uint8_t> reply);

  // Serves until `stop` is set or a ring closes (kUnavailable then: the
  // gpu_worker went away). Polls `stop` every `poll`.
  absl::Status Serve(shm::SlotRing& requests, shm::SlotRing& replies,
                     const std::atomic<bool>& stop, absl::Duration poll = absl::Milliseconds(100));

  // Null until the first kConfigure succeeded.
  const CpuAttention* attention() const { return attention_.get(); }

 private:
  AttentionServer() = default;
  absl::Status Configure(const wire::AttentionRequestHeader& h);

  ModelConfig config_;
  int64_t max_kv_tokens_ = 0;
  std::unique_ptr<CpuAttention> attention_;
};

}  // namespace tandem

#endif  // TANDEM_CPU_WORKER_SERVICE_ATTENTION_SERVER_H_
