// CGOPipe (MoE-Lightning Algorithm 1) as a step graph for the simulator:
// a few layers of one decode step, every micro-batch's tasks on the
// resource that runs them, in the order the single launcher thread issues
// them. The simulator then shows whether the pipeline reaches the HRM's
// max-of-resources time and where it stalls.
#ifndef TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_CGOPIPE_GRAPH_H_
#define TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_CGOPIPE_GRAPH_H_

#include <vector>

#include "coordinator/planner/moe_lightning/performance_model.h"
#include "coordinator/planner/sim/step_simulator.h"

namespace tandem::planner::ml {

struct CgoPipeGraph {
  StepGraph graph;
  // The task that finishes each simulated layer (its last micro-batch's
  // PostAttn, or the return of its CPU FFN share), by layer.
  std::vector<TaskId> layer_end;
  // Layer 0's pages and their staging copies, and the staging copies of
  // layer 1's first two pages: work of the previous step's last layer,
  // issued here only so that layer 0 can run. Each simulated layer carries
  // the next layer's pages (and copies), so without these the graph holds
  // exactly `layers` layers' work.
  std::vector<TaskId> carried_in;
  int layers = 0;
};

// Tasks per layer i and micro-batch j (those with zero time are left out):
// clang-format off
//   PreAttn(i,j)     gpu  norm + QKV (+ attention when A_g), after a launch task
//   OffloadQKV(i,j)  d2h  D1                               (A_g = 0)
//   CPUAttn(i,j)     cpu  attention on the CPU             (A_g = 0)
//   LoadH(i,j)       h2d  D2                               (A_g = 0)
//   LoadKV(i,j)      h2d  D4, before PreAttn               (A_g = 1, r_c < 1)
//   PostAttn(i,j)    gpu  O projection + FFN (GPU share), after a launch task
//   OffloadFFN / CPUFFN / LoadFFN  the host FFN share      (F_g = 0)
//   CtoPin(i,j)      cpu  page memcpy into pinned memory, two pages ahead of
//                         its PintoG                       (two-hop only)
//   PintoG(i,j)      h2d  D3, page j of layer i
// clang-format on
// Issue order (Algorithm 1): a prologue runs the front half (PreAttn,
// OffloadQKV, CPUAttn) of the first two micro-batches, each followed by
// the staging copy of one of layer 1's first two pages, and loads layer
// 0's pages; then for each (i, j): LoadH(i,j), the page j of layer i+1
// (also after the last simulated layer), PostAttn(i,j), the front half of
// the micro-batch two ahead in the flattened (layer, micro-batch) order,
// so (i, j+2) wraps to (i+1, j+2−n), and the staging copy of page j+2 of
// layer i+1, wrapping the same way. With one micro-batch the lookahead is
// one (the next layer's PreAttn needs this layer's PostAttn of the same
// micro-batch). With a host FFN share (F_g = 0, not in the paper) the
// lookahead is one, so that a micro-batch waiting for its CPU FFN does not
// block the GPU stream, and each LoadFFN is issued just before its
// micro-batch's next PreAttn, so that it does not block the H2D stream.
// Dependencies: the data flow above; PostAttn(i,·) waits for the last page
// of layer i; PreAttn(i,·) for the pages holding the attention weights when
// they are not resident (they are paged first); page j of layer i+1 for
// the last PostAttn of layer i−1 (the double buffer's other half) and for
// its staging copy; a staging copy for the DMA three pages before it (the
// pinned slot it reuses).
CgoPipeGraph BuildCgoPipeGraph(const LayerTimes& t, const PolicyPoint& p,
                               int layers);

// Steady-state seconds per layer: the distance between the ends of the
// first and the last-but-one simulated layers over the layers between them
// (the prologue and the last layer, which has no successor's work queued,
// are left out); with two layers the distance between their ends; the
// makespan for a single layer.
double SteadyLayerSeconds(const CgoPipeGraph& g, const SimResult& r);

// Busy seconds of `resource` in one layer: the simulated busy time less the
// carried-in pages, over the simulated layers.
double LayerBusySeconds(const CgoPipeGraph& g, const SimResult& r,
                        Resource resource);

}  // namespace tandem::planner::ml

#endif  // TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_CGOPIPE_GRAPH_H_
