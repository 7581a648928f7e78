// The cpu_worker's expert service: holds the weights of the routed experts
// placed on the CPU and computes them for a gpu_worker, request by request,
// over a pair of shared-memory rings.
#ifndef TANDEM_CPU_WORKER_SERVICE_EXPERT_SERVER_H_
#define TANDEM_CPU_WORKER_SERVICE_EXPERT_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/checkpoint.h"
#include "common/shm/host_weight_store.h"
#include "common/shm/slot_ring.h"
#include "cpu_worker/ops/mlp.h"

namespace tandem {

// experts[layer] = the routed experts of that layer computed here.
using ExpertPlacement = std::vector<std::vector<int32_t>>;

// "all", "none", "N-per-layer" (the first N experts of each MoE layer),
// "first-N-layers" (every expert of layers 0..N-1, llama.cpp's --n-cpu-moe)
// or one count per layer, "N0,N1,..." (the first N_l experts of layer l; what
// a planner policy whose layers differ asks for), as the --cpu-experts flag
// spells it; InvalidArgument otherwise.
absl::StatusOr<ExpertPlacement> ParseCpuExperts(const std::string& spec, const ModelConfig& c);

// OK unless `spec` asks for CPU experts (anything but "none") of a model
// that has no routed experts: the coordinator and `tandem generate` refuse
// that at once (a cpu_worker started for it would wait for rings the
// gpu_worker never makes). A cpu_worker serving only CPU attention takes
// "all" of a dense model, so ParseCpuExperts itself allows it.
absl::Status CheckCpuExpertsApply(const std::string& spec, const ModelConfig& c);

class ExpertServer {
 public:
  static absl::StatusOr<std::unique_ptr<ExpertServer>> Create(const Checkpoint& ckpt,
                                                              const ExpertPlacement& placement,
                                                              ops::ComputeType prefer);
  // The same, computing from a host weight store (common/shm/
  // expert_weight_store.h) that must outlive the server: weights in the
  // compute dtype are used in place, the same bytes the gpu_worker maps.
  static absl::StatusOr<std::unique_ptr<ExpertServer>> CreateFromStore(
      const shm::HostWeightStore& store, const ModelConfig& config,
      const ExpertPlacement& placement, ops::ComputeType prefer);

  // Computes one request into `reply` (a ring slot); returns the reply size.
  // Malformed requests and experts not held here get an error reply.
  int64_t Handle(absl::Span<const uint8_t> request, absl::Span<uint8_t> reply);

  // Serves until `stop` is set or a ring closes (kUnavailable then: the
  // gpu_worker went away). Polls `stop` every `poll`.
  absl::Status Serve(shm::SlotRing& requests, shm::SlotRing& replies,
                     const std::atomic<bool>& stop, absl::Duration poll = absl::Milliseconds(100));

  int64_t num_experts_held() const { return static_cast<int64_t>(experts_.size()); }
  // Runs once, when Serve() gets its first request: by then the gpu_worker
  // has finished LoadModel (e.g. mapped the weight store, whose name can go).
  void SetOnFirstRequest(std::function<void()> fn) { on_first_request_ = std::move(fn); }

 private:
  ExpertServer() = default;
  int64_t hidden_ = 0;
  absl::flat_hash_map<int64_t, ops::MlpWeights> experts_;  // key: layer * 2^20 + expert
  ops::MlpScratch scratch_;
  std::vector<ops::MlpCall> calls_;  // one request's jobs, for RunMlps
  std::function<void()> on_first_request_;
};

}  // namespace tandem

#endif  // TANDEM_CPU_WORKER_SERVICE_EXPERT_SERVER_H_
