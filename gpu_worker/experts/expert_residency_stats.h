// Counters of the gpu_worker's expert cache (ExpertResidency), per layer and
// in total, and their Prometheus text exposition.
//
// Terms:
//  - activation: an expert a step routed at least one token to, at a layer;
//  - hit: an activation whose expert was resident in the GPU cache when the
//    layer was planned (wherever the split then ran it); miss: any other
//    activation. hits + misses = activations, always;
//  - load: a miss the split runs on the GPU, so its weights cross the link on
//    demand (admitted: a load the score cache then keeps resident);
//  - eviction: a resident losing its slot, to an admitted load or a prefetch;
//  - prefetch issued: an expert of layer l + 1 loaded while layer l runs;
//    used: a prefetched expert activated before it is evicted; wasted: one
//    evicted first. Precision = used / issued (an issued prefetch still
//    resident and not yet activated counts as not used so far).
#ifndef TANDEM_GPU_WORKER_EXPERTS_EXPERT_RESIDENCY_STATS_H_
#define TANDEM_GPU_WORKER_EXPERTS_EXPERT_RESIDENCY_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/experts/expert_transition_table.h"

namespace tandem {

struct LayerResidencyStats {
  int64_t plans = 0;        // PlanLayer calls for the layer
  int64_t activations = 0;  // hits + misses
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t gpu_computed = 0;  // activations the split ran on the GPU
  int64_t cpu_computed = 0;  // activations the split ran on the CPU
  int64_t loads = 0;         // misses run on the GPU (on-demand transfers)
  int64_t admitted = 0;      // loads kept resident
  int64_t evictions = 0;     // to admitted loads and to prefetches
  int64_t prefetch_issued = 0;
  int64_t prefetch_used = 0;
  int64_t prefetch_wasted = 0;  // evicted before being activated

  // hits / activations; 0 before any activation.
  double hit_rate() const;
  // prefetch_used / prefetch_issued; 0 before any prefetch.
  double prefetch_precision() const;
  // Adds another layer's counters (for the total).
  void Add(const LayerResidencyStats& other);
};

struct ExpertResidencyStats {
  LayerResidencyStats total;                // the sum over layers
  std::vector<LayerResidencyStats> layers;  // [num_layers]
  int64_t resident = 0;                     // experts resident now, all layers
  int64_t capacity = 0;                     // slots, all layers
  // The transition table's prediction accuracy: its top-|activated at l|
  // transition-backed prediction for layer l + 1 against what layer l + 1
  // then activated (see ExpertResidency).
  experts::PredictionAccuracy transition;
};

// The Prometheus text exposition (with # HELP and # TYPE lines) of `stats`,
// every name starting with `prefix` (e.g. "tandem_expert"):
//   counters  <prefix>_cache_hits_total, _cache_misses_total,
//             _cache_loads_total, _cache_admitted_total,
//             _cache_evictions_total, _gpu_computed_total, _cpu_computed_total,
//             _prefetch_issued_total, _prefetch_used_total,
//             _prefetch_wasted_total;
//             per layer <prefix>_layer_cache_hits_total{layer="l"},
//             _layer_cache_misses_total, _layer_prefetch_issued_total,
//             _layer_prefetch_used_total
//   gauges    <prefix>_cache_resident, _cache_capacity, _cache_hit_ratio,
//             _prefetch_precision, _transition_precision,
//             _transition_recall
// The totals are separate unlabelled series rather than the sum of the
// labelled ones so that a dashboard can read them without sum(). `labels`,
// when not empty, is added to every series as is (e.g. `rank="0"`); the
// caller escapes label values.
std::string RenderPrometheus(const ExpertResidencyStats& stats,
                             absl::string_view prefix = "tandem_expert",
                             absl::string_view labels = "");

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_EXPERTS_EXPERT_RESIDENCY_STATS_H_
