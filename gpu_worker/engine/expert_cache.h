// The engine's expert cache: carries out ExpertResidency's plans
// (gpu_worker/experts/expert_residency.h: HybriMoE's score cache and
// CPU/GPU split, Klotski's transition-table prefetch) on a device. Each MoE
// layer has `capacity_per_layer` slots in device memory holding one routed
// expert's gate/up/down each; every routed expert also stays in host memory
// (the engine's ModelWeights), where the CPU computes the ones the split
// gives it and from where the others are copied in.
//
// Per layer and step, in layer order, the engine
//   1. Plan()s the layer's routing: hits, loads, CPU experts, evictions,
//      prefetches (waiting first for the prefetches into this layer);
//   2. sends the plan's CPU experts to its expert offload, then computes the
//      hits from their slots (Weights) and each load (Load: copied into the
//      slot it is admitted to, or into a scratch slot, then computed);
//   3. calls Finish(), which starts copying the next layer's prefetches.
// Copies go through the device's copy engine; on a device whose ops are
// queued (a GPU) the engine's queue is drained before a slot that queued
// ops may still read is overwritten.
#ifndef TANDEM_GPU_WORKER_ENGINE_EXPERT_CACHE_H_
#define TANDEM_GPU_WORKER_ENGINE_EXPERT_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/experts/expert_split.h"
#include "common/hardware_profile.h"
#include "common/model_config.h"
#include "cpu_worker/ops/mlp.h"
#include "gpu_worker/engine/copy_engine.h"
#include "gpu_worker/engine/device.h"
#include "gpu_worker/experts/expert_residency.h"

namespace tandem {

struct LayerWeights;

struct ExpertCacheOptions {
  int capacity_per_layer = 0;  // 0: no cache (experts resident or offloaded as placed)
  double alpha = experts::ExpertScoreCache::kDefaultAlpha;
  int prefetch_budget = 1;     // experts of the next layer prefetched per layer
  // False (Klotski): every activated expert runs on the device, the misses
  // loaded in turn; the split gives the CPU none.
  bool cpu_share = true;
  // The split's cost model per expert (HybriMoE): GPU and CPU compute time
  // for a number of tokens, and one expert's transfer. Null functions take
  // ExpertCache::DefaultCosts, or CostsFromProfile where `profile` is set.
  experts::ExpertCosts costs;
  // Measured figures of the machine (the device's GPU and link sections,
  // the host's CPU section): the costs come from them when `costs` is null.
  std::optional<HardwareProfile> profile;
};

class ExpertCache {
 public:
  // `layers` are the model's (routed experts unquantized on a device that
  // copies; not owned, outlive the cache, as do `device` and `copies`).
  static absl::StatusOr<std::unique_ptr<ExpertCache>> Create(
      const ModelConfig& config, const std::vector<LayerWeights>& layers, Device& device,
      CopyEngine& copies, const ExpertCacheOptions& options);
  ~ExpertCache();

  // A cost model from one expert's size: `bytes` of weights and 2 * bytes
  // / elem FLOPs per token, at the given link bandwidth and compute rates.
  static experts::ExpertCosts DefaultCosts(int64_t expert_bytes, int64_t flops_per_token,
                                           double link_gbs = 25, double gpu_tflops = 100,
                                           double cpu_gflops = 200);
  // HybriMoE's cost model from measured figures (each side a roofline plus
  // its fixed cost):
  //   GPU(t)   = launch + max(bytes / gpu.memory_bandwidth, flops·t / gpu.bf16_flops)
  //   CPU(t)   = op_overhead + max(bytes / cpu.memory_bandwidth, flops·t / cpu.bf16_flops)
  //   transfer = h2d_latency + bytes / link.h2d_bandwidth
  // A figure the profile lacks (0) takes DefaultCosts' value for that term;
  // the CPU's f32 rate stands in for a missing bf16 rate.
  static experts::ExpertCosts CostsFromProfile(const HardwareProfile& hw, int64_t expert_bytes,
                                               int64_t flops_per_token);
  // The cost model the split uses.
  const experts::ExpertCosts& costs() const { return costs_; }

  // Plans layer `layer` of this step from ids [tokens, top_k] and their
  // routing weights as the router chose them, after the prefetches into
  // the layer have landed. The slots follow the plan at once (evictions
  // freed, admitted loads and the next layer's prefetches given slots whose
  // data is marked missing until copied), so a step that fails part-way
  // leaves the cache consistent: a slot whose copy never landed is filled
  // again when next used.
  absl::StatusOr<LayerPlan> Plan(int layer, absl::Span<const int32_t> ids,
                                 absl::Span<const float> weights, int top_k);
  // The device-resident weights of a hit of the layer just planned (its
  // slot as it was before this plan's evictions).
  absl::StatusOr<ops::MlpWeights> Weights(int layer, int expert) const;
  // Copies a load of the layer just planned to the device — into the slot
  // it is admitted to, else into the scratch slot — and returns its weights
  // there. Call after the layer's hits were issued: the device's queue is
  // drained before the first load overwrites a slot a hit may still read.
  absl::StatusOr<ops::MlpWeights> Load(int layer, int expert);
  // After the layer's experts were issued: starts copying the next layer's
  // prefetches into their slots.
  absl::Status Finish(const LayerPlan& plan);

  const ExpertResidency& residency() const { return residency_; }

 private:
  ExpertCache(const std::vector<LayerWeights>& layers, Device& device, CopyEngine& copies,
              ExpertResidency residency, experts::ExpertCosts costs)
      : layers_(layers), device_(device), copies_(copies), residency_(std::move(residency)),
        costs_(std::move(costs)) {}
  // Device bytes of slot `slot` of `layer` (slot -1: the scratch slot).
  uint8_t* SlotData(int layer, int slot) const;
  // The expert's weights read from `at` (its three matrices back to back).
  ops::MlpWeights At(int layer, int expert, uint8_t* at) const;
  // Queues the copies of the expert into `at`; when all have landed,
  // `done` runs (on the copy engine's thread) with the first failure.
  void CopyIn(int layer, int expert, uint8_t* at, std::function<void(absl::Status)> done);
  // Copies the expert into `at` and waits.
  absl::Status CopyNow(int layer, int expert, uint8_t* at);
  // Gives the expert a free slot of the layer (its data missing).
  absl::StatusOr<int> TakeSlot(int layer, int expert);
  void FreeSlot(int layer, int expert);
  absl::Status WaitPrefetches(int layer);

  const std::vector<LayerWeights>& layers_;
  Device& device_;
  CopyEngine& copies_;
  ExpertResidency residency_;
  experts::ExpertCosts costs_;
  int capacity_ = 0;
  int64_t expert_bytes_ = 0;  // one expert's three matrices, 64-byte aligned
  DeviceMemory slots_;        // [layers, capacity + 1 (scratch), expert_bytes]
  std::vector<std::vector<int>> slot_of_;  // [layer][expert] -> slot, -1: not resident
  std::vector<std::vector<int>> free_;     // [layer] free slots
  // The layer just planned: its hits' slots.
  std::vector<int> hit_slot_;  // [expert], -1: not a hit

  mutable absl::Mutex mu_;
  // [layer][slot]: the slot holds its expert's weights.
  std::vector<std::vector<char>> valid_ ABSL_GUARDED_BY(mu_);
  std::vector<int> prefetch_pending_ ABSL_GUARDED_BY(mu_);  // [layer] experts in flight
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_EXPERT_CACHE_H_
