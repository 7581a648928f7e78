#include "gpu_worker/service/worker_service.h"

#include "absl/strings/str_cat.h"
#include "common/shm/shm_segment.h"
#include "common/status_macros.h"
#include "gpu_worker/service/host_profiler.h"
#include "gpu_worker/service/model_loader.h"
#include "proto/grpc_status.h"

namespace tandem {

WorkerService::~WorkerService() {
  absl::MutexLock lock(&mu_);
  executor_.reset();  // before the offloads it points at
  offload_.reset();
  attention_offload_.reset();
}

absl::StatusOr<proto::LoadModelResponse> WorkerService::DoLoadModel(
    const proto::LoadModelRequest& req, grpc::ServerContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (stopping_.load()) return absl::UnavailableError("worker is shutting down");
  // Drop the old model first: its memory and its rings (a new cpu_worker may
  // be attaching under the same names).
  executor_.reset();
  offload_.reset();
  attention_offload_.reset();
  tensor_parallel_.reset();  // leaves the old group (its peers fail fast)
  // A store whose cpu_worker died is removed here (nobody else may be
  // supervising it); a live cpu_worker's store stays.
  for (const auto& store : expert_stores_) (void)shm::RemoveStaleSegments(store->name());
  expert_stores_.clear();
  absl::StatusOr<LoadedModel> m = LoadModelForWorker(
      req, [&] { return stopping_.load() || (ctx != nullptr && ctx->IsCancelled()); }, device_);
  if (!m.ok()) return m.status();
  expert_stores_ = std::move(m->expert_stores);
  offload_ = std::move(m->offload);
  attention_offload_ = std::move(m->attention);
  tensor_parallel_ = std::move(m->tensor_parallel);
  executor_ = std::move(m->executor);
  draining_.store(false);
  return m->response;
}

absl::StatusOr<proto::StepResult> WorkerService::DoStep(const proto::StepPlan& plan) {
  absl::MutexLock lock(&mu_);
  if (draining_.load()) return absl::UnavailableError("worker is draining: no more steps");
  if (executor_ == nullptr) return absl::FailedPreconditionError("Step before LoadModel");
  absl::StatusOr<proto::StepResult> r = executor_->Run(plan);
  if (r.ok()) steps_done_.fetch_add(1);
  return r;
}

absl::StatusOr<proto::ProfileResponse> WorkerService::DoProfile() {
  absl::MutexLock lock(&mu_);  // never measure while a step competes for the cores
  if (device_.measure == nullptr) return ProfileHostDevice();
  // The device's own figures: its memory, its GEMMs, the link to it.
  HardwareProfile hw;
  TANDEM_RETURN_IF_ERROR(device_.measure(&hw));
  proto::ProfileResponse r;
  r.set_read_bandwidth_gbs(hw.gpu.memory_bandwidth / 1e9);
  r.set_gemm_gflops_bf16(hw.gpu.bf16_flops / 1e9);
  r.set_gemm_gflops_f32(hw.gpu.f32_flops / 1e9);
  r.set_h2d_bandwidth_gbs(hw.link.h2d_bandwidth / 1e9);
  r.set_launch_overhead_us(hw.gpu.launch_overhead_s * 1e6);
  return r;
}

void WorkerService::DoDrain() {
  draining_.store(true);
  absl::MutexLock lock(&mu_);  // waits for the step in flight
}

void WorkerService::DoShutdown() {
  stopping_.store(true);  // a LoadModel waiting for its cpu_worker gives up
  DoDrain();
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
}

grpc::Status WorkerService::LoadModel(grpc::ServerContext* ctx, const proto::LoadModelRequest* req,
                                      proto::LoadModelResponse* resp) {
  absl::StatusOr<proto::LoadModelResponse> r = DoLoadModel(*req, ctx);
  if (r.ok()) *resp = std::move(*r);
  return ToGrpcStatus(r.status());
}

grpc::Status WorkerService::Profile(grpc::ServerContext*, const proto::ProfileRequest*,
                                    proto::ProfileResponse* resp) {
  absl::StatusOr<proto::ProfileResponse> r = DoProfile();
  if (r.ok()) *resp = std::move(*r);
  return ToGrpcStatus(r.status());
}

grpc::Status WorkerService::Step(grpc::ServerContext*, const proto::StepPlan* plan,
                                 proto::StepResult* result) {
  absl::StatusOr<proto::StepResult> r = DoStep(*plan);
  if (r.ok()) *result = std::move(*r);
  return ToGrpcStatus(r.status());
}

grpc::Status WorkerService::Drain(grpc::ServerContext*, const proto::DrainRequest*,
                                  proto::DrainResponse*) {
  DoDrain();
  return grpc::Status::OK;
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext*, const proto::DrainRequest*,
                                     proto::DrainResponse*) {
  DoShutdown();
  return grpc::Status::OK;
}

grpc::Status WorkerService::NewTensorParallelGroup(grpc::ServerContext*,
                                                   const proto::NewTensorParallelGroupRequest* req,
                                                   proto::NewTensorParallelGroupResponse* resp) {
  if (req->size() < 2) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("NewTensorParallelGroup: a group of ", req->size(), " ranks")));
  }
  if (device_.new_group_id == nullptr) return grpc::Status::OK;  // the coordinator names it
  absl::StatusOr<std::string> id = device_.new_group_id();
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_group_id(*id);
  return grpc::Status::OK;
}

}  // namespace tandem
