// Turns a LoadModelRequest into a ready StepExecutor: validates the request,
// opens the checkpoint, sizes the KV cache, builds the engine and, when the
// request places routed experts or CPU attention (cpu_kv_tokens) on a
// cpu_worker, creates the shared-memory rings to it and waits (bounded) for
// it to attach (and, for attention, to allocate the CPU KV cache).
#ifndef TANDEM_GPU_WORKER_SERVICE_MODEL_LOADER_H_
#define TANDEM_GPU_WORKER_SERVICE_MODEL_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/shm/host_weight_store.h"
#include "gpu_worker/engine/all_reduce.h"
#include "gpu_worker/engine/device.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/service/worker_device.h"
#include "gpu_worker/engine/shm_attention_offload.h"
#include "gpu_worker/engine/expert_offload.h"
#include "gpu_worker/service/step_executor.h"
#include "proto/worker.pb.h"

namespace tandem {

struct LoadedModel {
  // Declared first so they are destroyed last: the engine points at them.
  // The cpu_workers' expert weight stores, mapped (to be pinned for DMA).
  std::vector<std::unique_ptr<shm::HostWeightStore>> expert_stores;
  // The tensor-parallel group (null: a single rank); the engine points at
  // it, so whoever keeps the executor keeps this too.
  std::unique_ptr<AllReduce> tensor_parallel;
  std::unique_ptr<ExpertOffload> offload;         // null: every expert local
  std::unique_ptr<ShmAttentionOffload> attention;  // null: no CPU attention
  std::unique_ptr<StepExecutor> executor;
  proto::LoadModelResponse response;
};

// Engine options from the request's sizes (0 = default) and the model:
// max_sequences = max(1, kv_blocks * block_size / max_context).
absl::StatusOr<EngineOptions> EngineOptionsFor(const proto::LoadModelRequest& req,
                                               const ModelConfig& config);

// Per layer, the experts the request's cpu_placement sends to the cpu_worker
// (num_layers entries; empty lists where none). InvalidArgument for a layer
// or expert the model does not have.
absl::StatusOr<std::vector<std::vector<int32_t>>> RemoteExperts(
    const proto::LoadModelRequest& req, const ModelConfig& config);

// Codes: InvalidArgument for a malformed request, NotFound/Unimplemented as
// Checkpoint::Open gives them, Unavailable if no cpu_worker attaches in time,
// Cancelled if `cancelled` (polled while waiting for it) turns true; a
// cpu_worker that refuses the CPU KV cache shape, with its own code.
// The engine runs on `device` (default: the host device), whose
// tensor-parallel groups it joins.
absl::StatusOr<LoadedModel> LoadModelForWorker(const proto::LoadModelRequest& req,
                                               const std::function<bool()>& cancelled = {},
                                               const WorkerDevice& device = {});

// Bytes of weights the engine holds (in their compute dtype).
int64_t WeightBytes(const ModelWeights& w);

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_SERVICE_MODEL_LOADER_H_
