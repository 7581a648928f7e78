// The figures behind Klotski's planner: the per-batch and per-expert times
// of one MoE block (turned from ModelCost's FLOPs and bytes into seconds on a
// HardwareProfile) and the memory model the paper never wrote down (its
// planner's n ran out of memory for Mixtral-8x22B on a 3090, digest §5.1).
//
// Memory model (ours). GPU, in order of preference for what stays resident:
//   resident weights   embedding, LM head, norms, gates (64 KB per Mixtral
//                      layer: the port keeps them on the GPU), shared experts,
//                      and every layer's attention when it fits;
//   weight buffers     K hot experts + `cold_buffers` cold experts (each is
//                      freed when it finishes, so two suffice: one computes
//                      while the next loads) + two attention buffers (this
//                      layer's and the next) when attention is streamed;
//   KV                 all of it when it fits, else two batches of one layer
//                      (the KV-prefetch stream's double buffer);
//   activations        the hidden states and results of all n batches (the
//                      expert phase runs over every token of the group) plus
//                      one batch's working set, at the prefill peak;
//   reserve            CUDA context, allocator slack (the port reserves 2 GB).
// Host: the weights not resident on the GPU, the KV when it is not on the
// GPU, and a reserve for the OS and the process.
// Placements tried, first that fits wins: (KV on GPU, attention resident),
// (KV on host, attention resident), (KV on host, attention streamed).
#ifndef TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_MODEL_H_
#define TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/cost/workload.h"
#include "coordinator/planner/klotski/klotski_inequalities.h"

namespace tandem::planner {

struct KlotskiOptions {
  // bs; 0 = the best of 4, 8, 16, 32, 64 (the paper's sweep).
  int per_batch_size = 0;
  int hot_experts = 0;    // K; 0 = the model's top-k (the paper's default)
  int cold_buffers = 2;   // GPU buffers for gate-triggered cold experts
  int max_groups = 1024;  // the largest n tried
  double gpu_reserve_bytes = 2e9;  // the MindSpore port's 2000 MB
  // OS, process, pinned staging (our estimate).
  double host_reserve_bytes = 8e9;
};

enum class KlotskiPhase { kPrefill, kDecode };

struct KlotskiPlacement {
  bool kv_on_gpu = false;
  bool attention_resident = true;
};

struct KlotskiMemory {
  KlotskiPlacement placement;
  double gpu_resident_weights = 0;
  double gpu_weight_buffers = 0;
  double gpu_kv = 0;
  double gpu_activations = 0;
  double gpu_reserve = 0;
  double host_weights = 0;
  double host_kv = 0;
  double host_reserve = 0;
  bool fits = false;  // both totals within the profile's capacities

  double gpu_total() const {
    return gpu_resident_weights + gpu_weight_buffers + gpu_kv +
           gpu_activations + gpu_reserve;
  }
  double host_total() const { return host_weights + host_kv + host_reserve; }
  std::string ToString() const;
};

// The memory of a group of n batches of bs sequences, with the first
// placement (see above) that fits; when none fits, the last one tried with
// fits = false.
KlotskiMemory KlotskiMemoryFor(const ModelCost& m, const HardwareProfile& hw,
                               const Workload& w, const KlotskiOptions& o,
                               int bs, int n);

// Seconds of one MoE block's pieces for one phase, batch size, group size and
// placement. Expert routing is taken as uniform (each token's k choices
// spread evenly over the E experts): the hot experts then carry K/E of the
// routed tokens, which is conservative for (III) — the paper's measured hot
// experts carry more (53.7% for 2 of 8 in one Mixtral layer).
struct KlotskiCosts {
  KlotskiPhase phase = KlotskiPhase::kDecode;
  int bs = 0;
  int n = 0;
  KlotskiPlacement placement;
  double attention_compute_s = 0;  // one batch's attention kernels on the GPU
  double kv_load_s = 0;  // one batch's KV of one layer, host to GPU (0 on GPU)
  // One batch's new K/V of one layer, GPU to host (0 on GPU).
  double kv_store_s = 0;
  double gate_s = 0;          // one batch's norm + router
  int hot_experts = 0;        // K
  double active_experts = 0;  // expected distinct experts the group routes to
  int cold_experts = 0;       // |Q| = ceil(active - K), at least 0
  // cold_revealed_by[m]: the batch whose gate first (in expectation) routes
  // to the (m+1)-th cold expert, which is when its load is issued.
  std::vector<int> cold_revealed_by;
  double tokens_per_expert = 0;  // routed tokens per active expert
  double expert_compute_s = 0;   // one active expert over its tokens
  double shared_expert_s = 0;    // the shared expert over the group (0 if none)
  double expert_io_s = 0;        // t_IO,E
  double gate_io_s = 0;          // t_IO,G (0: gates resident)
  double attention_io_s = 0;     // t_IO,A (0 when attention is resident)
  double embedding_s = 0;        // the group's embedding lookup
  double head_s = 0;             // final norm + LM head of the group's rows
  int num_layers = 0;
};

// FailedPrecondition when the model is not MoE in every layer (Klotski's
// pipeline is expert-aware) or the profile lacks a GPU figure it needs.
absl::StatusOr<KlotskiCosts> KlotskiCostsFor(const ModelCost& m,
                                             const HardwareProfile& hw,
                                             const Workload& w,
                                             KlotskiPhase phase, int bs, int n,
                                             const KlotskiPlacement& placement,
                                             int hot_experts);

// The inequalities' view of the costs. t_cA is the attention of one batch as
// the paper's profiler measures it: the kernels, or its KV transfer when the
// KV streams from the host and takes longer (the KV stream double-buffers,
// so the next batch's load hides under this batch's compute).
KlotskiLayerTimes ToLayerTimes(const KlotskiCosts& c);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_MODEL_H_
