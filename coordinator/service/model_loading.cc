#include "coordinator/service/model_loading.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/grpc_status.h"

namespace tandem::coord {
namespace {

constexpr int kMaxMessageBytes = 256 << 20;

}  // namespace

bool ModelSpec::has_cpu_experts() const {
  return std::any_of(cpu_experts.begin(), cpu_experts.end(),
                     [](const auto& layer) { return !layer.empty(); });
}

absl::Status ModelSpec::Validate() const {
  if (model_path.empty()) {
    return absl::InvalidArgumentError("model: the path is empty");
  }
  if (max_context <= 0 || block_size <= 0 || kv_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: max_context (", max_context, "), block_size (", block_size,
        ") and kv_blocks (", kv_blocks, ") must be positive"));
  }
  for (size_t l = 0; l < cpu_experts.size(); ++l) {
    for (int32_t e : cpu_experts[l]) {
      if (e < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model: CPU expert ", e, " of layer ", l, " is negative"));
      }
    }
  }
  if (cpu_workers < 1 || (cpu_workers > 1 && !has_cpu_experts())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: cpu_workers (", cpu_workers, ") must be 1, or more with experts to share"));
  }
  if (cpu_kv_tokens < 0) {
    return absl::InvalidArgumentError("model: cpu_kv_tokens must be >= 0");
  }
  if (uses_cpu_worker() && !absl::StartsWith(data_segment, "/tandem-")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: experts or KV on a cpu_worker need a data_segment named "
        "\"/tandem-...\", got \"",
        data_segment, "\""));
  }
  if (micro_batch_size < 0 || expert_prefetch < 0) {
    return absl::InvalidArgumentError("model: micro_batch_size and expert_prefetch must be >= 0");
  }
  if ((experts_on_device_only || expert_prefetch > 0) && expert_cache_slots == 0) {
    return absl::InvalidArgumentError(
        "model: experts on the device only and expert prefetch need the expert cache");
  }
  if (micro_batch_size > 0 && expert_cache_slots > 0) {
    return absl::InvalidArgumentError(
        "model: micro-batches do not combine with the expert cache (its plan covers a whole "
        "step)");
  }
  if (attach_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("model: attach_timeout must be > 0");
  }
  return absl::OkStatus();
}

int64_t ModelSpec::KvBlocksAfterRounding() const {
  if (max_context <= 0 || block_size <= 0) return 0;
  const int64_t sequences =
      std::max<int64_t>(1, kv_blocks * block_size / max_context);
  return sequences * ((max_context + block_size - 1) / block_size);
}

proto::LoadModelRequest BuildLoadModelRequest(const ModelSpec& spec) {
  proto::LoadModelRequest r;
  r.set_model_path(spec.model_path);
  r.mutable_placement()->set_whole_model(true);
  r.set_max_context(spec.max_context);
  r.set_kv_blocks(spec.kv_blocks);
  r.set_block_size(spec.block_size);
  r.set_weight_segment(spec.weight_segment);
  r.set_weight_budget_bytes(spec.weight_budget_bytes);
  for (int64_t l : spec.streamed_ffn_layers) r.add_streamed_ffn_layers(l);
  r.set_expert_cache_slots(spec.expert_cache_slots);
  for (int64_t n : spec.cpu_ffn_rows) r.add_cpu_ffn_rows(n);
  r.set_prefill_gpu_tokens(spec.prefill_gpu_tokens);
  r.set_micro_batch_size(spec.micro_batch_size);
  r.set_experts_on_device_only(spec.experts_on_device_only);
  r.set_expert_prefetch(spec.expert_prefetch);
  if (spec.uses_cpu_worker()) {
    r.set_data_segment(spec.data_segment);
    r.set_cpu_kv_tokens(spec.cpu_kv_tokens);
    r.set_cpu_workers(spec.cpu_workers);
    for (const std::vector<int32_t>& layer : spec.cpu_experts) {
      auto* l = r.mutable_cpu_placement()->add_experts();
      for (int32_t e : layer) l->add_experts(e);
    }
    r.set_attach_timeout_ms(
        std::max<int64_t>(1, absl::ToInt64Milliseconds(spec.attach_timeout)));
  }
  return r;
}

std::shared_ptr<grpc::Channel> MakeWorkerChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Each channel its own connection: a restarted worker at the same address
  // is reached afresh.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

absl::StatusOr<std::string> NewTensorParallelGroupId(const std::string& address, int32_t size) {
  auto stub = proto::Worker::NewStub(MakeWorkerChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  proto::NewTensorParallelGroupRequest req;
  req.set_size(size);
  proto::NewTensorParallelGroupResponse resp;
  const grpc::Status s = stub->NewTensorParallelGroup(&ctx, req, &resp);
  if (!s.ok()) {
    return FromGrpcStatus(s, absl::StrCat("NewTensorParallelGroup on gpu_worker at ", address));
  }
  return resp.group_id();
}

std::unique_ptr<PendingLoad> PendingLoad::Start(proto::Worker::Stub& stub,
                                                proto::LoadModelRequest request,
                                                absl::Duration timeout) {
  auto p = std::unique_ptr<PendingLoad>(new PendingLoad());
  p->request_ = std::move(request);
  p->ctx_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  PendingLoad* self = p.get();
  stub.async()->LoadModel(&self->ctx_, &self->request_, &self->response_,
                          [self](grpc::Status s) {
                            {
                              absl::MutexLock lock(&self->mu_);
                              self->status_ =
                                  FromGrpcStatus(s, absl::StrCat(
                                                        "LoadModel on ",
                                                        self->ctx_.peer()));
                            }
                            self->done_.Notify();
                          });
  return p;
}

PendingLoad::~PendingLoad() {
  Cancel();
  done_.WaitForNotification();
}

bool PendingLoad::Wait(absl::Duration timeout) {
  return done_.WaitForNotificationWithTimeout(timeout);
}

void PendingLoad::Cancel() {
  if (!done_.HasBeenNotified()) ctx_.TryCancel();
}

absl::StatusOr<proto::LoadModelResponse> PendingLoad::result() const {
  if (!done_.HasBeenNotified()) {
    return absl::FailedPreconditionError("LoadModel still running");
  }
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  return response_;
}

absl::StatusOr<proto::LoadModelResponse> LoadModelOnWorker(
    proto::Worker::Stub& stub, const ModelSpec& spec, absl::Duration timeout) {
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  std::unique_ptr<PendingLoad> load =
      PendingLoad::Start(stub, BuildLoadModelRequest(spec), timeout);
  load->Wait();
  return load->result();
}

}  // namespace tandem::coord
