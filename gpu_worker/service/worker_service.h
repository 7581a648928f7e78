// The gpu_worker's gRPC Worker service: a thin shell around one Engine and
// its StepExecutor. Every handler is an absl-returning method underneath;
// ToGrpcStatus maps the result onto the wire.
//
// Threading: gRPC's sync server calls handlers on its own threads. LoadModel,
// Step and Profile hold one mutex for their whole run, so Steps are executed
// one at a time in arrival order of the lock (the engine is single-threaded);
// a Step that arrives while another runs waits for it. Drain and Shutdown
// wait for the running call to finish.
//
// Lifecycle: Step before LoadModel → FAILED_PRECONDITION. Drain → later Steps
// get UNAVAILABLE until the next LoadModel (a re-plan drains, reloads, goes
// on). Shutdown drains for good (LoadModel then fails too) and notifies the
// process (WaitForShutdown) so it can stop its server and exit.
#ifndef TANDEM_GPU_WORKER_SERVICE_WORKER_SERVICE_H_
#define TANDEM_GPU_WORKER_SERVICE_WORKER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/shm/host_weight_store.h"
#include "gpu_worker/engine/device.h"
#include "gpu_worker/engine/shm_attention_offload.h"
#include "gpu_worker/engine/shm_expert_offload.h"
#include "gpu_worker/service/step_executor.h"
#include "gpu_worker/service/worker_device.h"
#include "proto/worker.grpc.pb.h"

namespace tandem {

class WorkerService final : public proto::Worker::Service {
 public:
  WorkerService() = default;
  ~WorkerService() override;

  // The device every engine this worker loads runs on (default: the host
  // device). Set before serving.
  void SetDevice(WorkerDevice device) { device_ = std::move(device); }

  // --- gRPC handlers ---
  grpc::Status LoadModel(grpc::ServerContext* ctx, const proto::LoadModelRequest* req,
                         proto::LoadModelResponse* resp) override;
  grpc::Status Profile(grpc::ServerContext* ctx, const proto::ProfileRequest* req,
                       proto::ProfileResponse* resp) override;
  grpc::Status Step(grpc::ServerContext* ctx, const proto::StepPlan* plan,
                    proto::StepResult* result) override;
  grpc::Status Drain(grpc::ServerContext* ctx, const proto::DrainRequest* req,
                     proto::DrainResponse* resp) override;
  grpc::Status Shutdown(grpc::ServerContext* ctx, const proto::DrainRequest* req,
                        proto::DrainResponse* resp) override;
  // A communicator id for a tensor-parallel group this worker will be rank
  // 0 of; empty for the host device (the coordinator names its groups).
  grpc::Status NewTensorParallelGroup(grpc::ServerContext* ctx,
                                      const proto::NewTensorParallelGroupRequest* req,
                                      proto::NewTensorParallelGroupResponse* resp) override;

  // --- the same, in absl terms ---
  // Opens the checkpoint and builds the engine: KV for
  // max(1, kv_blocks * block_size / max_context) sequences of max_context
  // tokens (0s take defaults: max_context min(model max, 8192), block_size
  // 16, kv_blocks 4 sequences' worth). With cpu_placement, creates the
  // expert rings named by data_segment and waits for the cpu_worker; with
  // cpu_kv_tokens, the attention rings likewise.
  // Replaces a model loaded before (its sequences are gone).
  // `ctx` (may be null) lets a cancelled call stop waiting for the cpu_worker.
  absl::StatusOr<proto::LoadModelResponse> DoLoadModel(const proto::LoadModelRequest& req,
                                                       grpc::ServerContext* ctx = nullptr);
  absl::StatusOr<proto::StepResult> DoStep(const proto::StepPlan& plan);
  absl::StatusOr<proto::ProfileResponse> DoProfile();
  void DoDrain();
  void DoShutdown();

  int64_t steps_done() const { return steps_done_.load(); }
  bool draining() const { return draining_.load(); }
  // True once Shutdown was called, or when it is called within `timeout`.
  bool WaitForShutdown(absl::Duration timeout) {
    return shutdown_.WaitForNotificationWithTimeout(timeout);
  }

 private:
  absl::Mutex mu_;  // one engine: LoadModel, Step and Profile run one at a time
  WorkerDevice device_;
  // The engine holds raw pointers to the offloads: executor_ goes first.
  std::vector<std::unique_ptr<shm::HostWeightStore>> expert_stores_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ExpertOffload> offload_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ShmAttentionOffload> attention_offload_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<AllReduce> tensor_parallel_ ABSL_GUARDED_BY(mu_);  // null: one rank
  std::unique_ptr<StepExecutor> executor_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};  // Shutdown called: set before taking mu_
  std::atomic<int64_t> steps_done_{0};
  absl::Notification shutdown_;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_SERVICE_WORKER_SERVICE_H_
