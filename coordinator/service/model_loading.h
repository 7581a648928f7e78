// Loading a model on a gpu_worker: what to load (ModelSpec) turned into a
// proto::LoadModelRequest, and the call itself, made asynchronously because
// it can take long — the worker reads the checkpoint and, when routed
// experts are placed on a cpu_worker, creates the shared-memory rings named
// by `data_segment` and returns only once that cpu_worker has attached (or
// UNAVAILABLE after attach_timeout). The caller starts the cpu_worker (with
// --expert-rings <data_segment>) meanwhile.
#ifndef TANDEM_COORDINATOR_SERVICE_MODEL_LOADING_H_
#define TANDEM_COORDINATOR_SERVICE_MODEL_LOADING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/worker.grpc.pb.h"

namespace tandem::coord {

struct ModelSpec {
  std::string model_path;  // HF directory or .gguf file, as the worker sees it
  int64_t max_context = 0;  // tokens per sequence; > 0
  int64_t block_size = 16;  // tokens per KV block; > 0
  // KV blocks on the gpu_worker; > 0. The worker sizes its cache in whole
  // sequences of max_context tokens; KvBlocksAfterRounding() says how many
  // blocks it will hold.
  int64_t kv_blocks = 0;
  // Per layer, the routed experts a cpu_worker computes (empty: none; a
  // shorter list leaves the remaining layers on the GPU).
  std::vector<std::vector<int32_t>> cpu_experts;
  // KV tokens held by the cpu_worker for requests the scheduler places on
  // the CPU pool (Neo): their attention runs there. 0: no CPU attention.
  int64_t cpu_kv_tokens = 0;
  // cpu_workers sharing cpu_experts (expert e on shard e % cpu_workers; see
  // LoadModelRequest.cpu_workers); >= 1.
  int32_t cpu_workers = 1;
  // POSIX shm name prefix of the cpu_worker's rings ("/tandem-<pid>-experts");
  // required when cpu_experts lists any expert or cpu_kv_tokens > 0.
  std::string data_segment;
  std::string weight_segment;  // host weight store to map, if any
  // Bytes of weights the gpu_worker keeps resident; 0: all (see
  // LoadModelRequest.weight_budget_bytes).
  int64_t weight_budget_bytes = 0;
  // The layers whose FFN weights are streamed, as a policy names them
  // (LoadModelRequest.streamed_ffn_layers); when given, the budget is not
  // consulted.
  std::vector<int64_t> streamed_ffn_layers;
  // GPU expert cache slots per MoE layer (LoadModelRequest.expert_cache_slots).
  int32_t expert_cache_slots = 0;
  // Dense MLP rows per layer computed on the gpu_worker's CPU
  // (LoadModelRequest.cpu_ffn_rows).
  std::vector<int64_t> cpu_ffn_rows;
  // Prefill rows whose CC part runs on the device
  // (LoadModelRequest.prefill_gpu_tokens).
  int64_t prefill_gpu_tokens = 0;
  // MoE-Lightning's micro-batch size (LoadModelRequest.micro_batch_size).
  int64_t micro_batch_size = 0;
  // Klotski's expert execution with the cache: all on the device, and the
  // experts prefetched per layer (LoadModelRequest.experts_on_device_only,
  // expert_prefetch).
  bool experts_on_device_only = false;
  int32_t expert_prefetch = 0;
  absl::Duration attach_timeout = absl::Seconds(60);

  bool has_cpu_experts() const;
  bool uses_cpu_worker() const { return has_cpu_experts() || cpu_kv_tokens > 0; }
  // InvalidArgument naming the bad field.
  absl::Status Validate() const;
  // max(1, kv_blocks * block_size / max_context) sequences of
  // ceil(max_context / block_size) blocks: the worker's rule.
  int64_t KvBlocksAfterRounding() const;
};

// The gpu_worker's request: whole_model placement plus the CPU experts.
proto::LoadModelRequest BuildLoadModelRequest(const ModelSpec& spec);

// An insecure channel to a worker with message limits large enough for the
// biggest step results (prompt log-probs of long chunks).
std::shared_ptr<grpc::Channel> MakeWorkerChannel(const std::string& address);

// Asks the gpu_worker at `address` (rank 0 of a group of `size`) for the
// group's communicator id: empty when its device leaves the naming to the
// coordinator. A failed call, or no answer within 30 s, is an error.
absl::StatusOr<std::string> NewTensorParallelGroupId(const std::string& address, int32_t size);

// One LoadModel call in flight. Thread-safe.
class PendingLoad {
 public:
  // Starts the call; `timeout` bounds it as a whole (the deadline).
  static std::unique_ptr<PendingLoad> Start(proto::Worker::Stub& stub,
                                            proto::LoadModelRequest request,
                                            absl::Duration timeout);
  ~PendingLoad();  // cancels the call if still running and waits for it

  // True once the call has ended (now or within `timeout`).
  bool Wait(absl::Duration timeout = absl::InfiniteDuration());
  bool done() const { return done_.HasBeenNotified(); }
  // Ends the call early: it finishes with kCancelled. Idempotent.
  void Cancel();
  // The outcome; call after Wait() returned true. Errors are prefixed with
  // "LoadModel on <peer>" where known.
  absl::StatusOr<proto::LoadModelResponse> result() const;

 private:
  PendingLoad() = default;

  grpc::ClientContext ctx_;
  proto::LoadModelRequest request_;
  proto::LoadModelResponse response_;
  absl::Notification done_;
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Synchronous form: starts the load and waits for it.
absl::StatusOr<proto::LoadModelResponse> LoadModelOnWorker(
    proto::Worker::Stub& stub, const ModelSpec& spec,
    absl::Duration timeout);

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_MODEL_LOADING_H_
