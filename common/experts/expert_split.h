// HybriMoE's intra-layer split of the activated experts between the GPU and
// the CPU (DAC'25; PKU-SEC-Lab/HybriMoE, KExpertsCache HSS; related.md §2).
//
// Each layer and step: order the activated experts cached-first, then by
// token count, descending. The GPU takes experts from the head of the list
// and the CPU from the tail; at every step the next expert goes to whichever
// side would finish it earlier. A cached expert costs the GPU its compute
// only; a non-cached one must first cross the link, and the transfers are
// pipelined behind the GPU's compute on their own copy stream (the link is a
// queue of its own: an expert starts when both the GPU and its transfer are
// done). The CPU side takes the experts with the fewest tokens, where its
// low FLOP rate hurts least and a transfer would be wasted.
//
// Choices where the source is vague:
//  - "Whichever side finishes earlier" is read as the finish time *after*
//    taking the candidate (the GPU's head expert versus the CPU's tail
//    expert), not the side that is idle first. Ties go to the GPU.
//  - Experts with zero tokens are not activated and are left out.
//  - Equal token counts keep the caller's order (a stable sort), so the
//    result is deterministic.
//
// Pure: no planner types, so the gpu_worker's expert code can call it each
// step with measured cost functions.
#ifndef TANDEM_COMMON_EXPERTS_EXPERT_SPLIT_H_
#define TANDEM_COMMON_EXPERTS_EXPERT_SPLIT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::experts {

// One activated expert of the layer this step.
struct ExpertWork {
  int expert = 0;       // the expert's index in its layer
  int64_t tokens = 0;   // tokens routed to it this step
  bool cached = false;  // resident in the GPU expert cache
};

// Seconds as functions of the tokens an expert processes.
struct ExpertCosts {
  std::function<double(int64_t tokens)> gpu_compute_s;
  std::function<double(int64_t tokens)> cpu_compute_s;
  double transfer_s = 0;  // one non-cached expert over the link
};

enum class Side { kGpu, kCpu };

struct ExpertAssignment {
  int expert = 0;
  int64_t tokens = 0;
  bool cached = false;
  Side side = Side::kGpu;
  double start_s = 0;         // when its compute starts
  double finish_s = 0;        // when its compute ends
  double transfer_end_s = 0;  // GPU, non-cached: when its weights have arrived
};

struct ExpertSplit {
  std::vector<ExpertAssignment> gpu;  // in GPU run order
  std::vector<ExpertAssignment> cpu;  // in CPU run order
  double gpu_finish_s = 0;
  double cpu_finish_s = 0;
  double link_busy_s = 0;  // transfers of the non-cached GPU experts
  double makespan_s() const {
    return gpu_finish_s > cpu_finish_s ? gpu_finish_s : cpu_finish_s;
  }
};

// The split. InvalidArgument for a missing cost function, negative tokens,
// a duplicate expert, or a cost that is negative or not finite.
absl::StatusOr<ExpertSplit> SplitExperts(absl::Span<const ExpertWork> experts,
                                         const ExpertCosts& costs);

}  // namespace tandem::experts

#endif  // TANDEM_COMMON_EXPERTS_EXPERT_SPLIT_H_
