// Klotski's expert-aware multi-batch pipeline (paper Algorithm 1, Fig. 9) as
// a StepGraph for the step simulator: one step (embedding, every MoE block,
// LM head) of a group of n batches.
//
// Per block l, on the resources:
//   gpu   attention of batches 0..n-1, gate of batches 0..n-1, the shared
//         expert, the K hot experts, then the cold experts in load order
//         (each expert runs over the tokens of all n batches);
//   h2d   (attention weights of l when streamed), then per batch: its KV
//         (when on the host) followed by one chunk of the hot-expert
//         prefetch, then the cold experts as the gates reveal them;
//   d2h   each batch's new K/V (when the KV lives on the host).
// Dependencies: a batch's attention waits for its KV; a KV load waits for the
// batch two before it to free the double buffer; a hot expert waits for its
// last chunk, and the chunks of layer l+1 wait for the hot expert of layer l
// whose buffer they reuse; a cold load waits for the gate that reveals it
// and for a free cold buffer (the compute of the cold expert `cold_buffers`
// before it); streamed attention weights wait for the layer two back to free
// their buffer.
//
// The link is one in-order stream here, where the real engine runs four
// CUDA streams over it: the hot prefetch is cut into n chunks interleaved
// with the KV loads to stand for the two sharing the link's bandwidth. Unlike
// the inequalities (which, as in the paper, charge only the weights to the
// link), the simulation charges the KV traffic too, so the predicted step
// shows the contention the paper's planner ignores (digest §5.2).
#ifndef TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_PIPELINE_H_
#define TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_PIPELINE_H_

#include "absl/status/statusor.h"
#include "coordinator/planner/klotski/klotski_model.h"
#include "coordinator/planner/sim/step_simulator.h"

namespace tandem::planner {

// InvalidArgument for n < 1, cold_buffers < 1 or costs that do not describe
// a step (no layers).
absl::StatusOr<StepGraph> BuildKlotskiStep(const KlotskiCosts& c,
                                           int cold_buffers);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_PIPELINE_H_
