// MoE-Lightning's Hierarchical Roofline Model (HRM, §4.1, Eq. 4–11): the
// attainable FLOP/s of an operation that runs on one memory level (the GPU)
// while its data lives on another (the CPU), the two turning points that
// say where it should run, and the balance point the policy search aims
// for. Pure functions on figures; the planner feeds them from ModelCost and
// the HardwareProfile.
//
// Notation (the paper's): level i computes (the GPU), level j holds the
// data (the CPU), B^{j,i} is the link j→i (PCIe host-to-device). An
// operation's intensity is measured against each level separately: I^i =
// FLOPs / bytes it touches in level i's memory, I^j = FLOPs / bytes that
// must come from level j.
#ifndef TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_HRM_H_
#define TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_HRM_H_

#include <string_view>

namespace tandem::planner::ml {

// One processor paired with its memory (Eq. 4–5).
struct RooflineLevel {
  double peak_flops = 0;  // P_peak, FLOP/s
  double bandwidth = 0;   // B_peak of its own memory, bytes/s
};

// Two levels and the link between them.
struct HierarchicalRoofline {
  RooflineLevel compute;      // level i (GPU)
  RooflineLevel home;         // level j (CPU), where the data lives
  double link_bandwidth = 0;  // B^{j,i}, bytes/s
};

// Which roof bounds an operation.
enum class Roof {
  kCompute,      // P_peak of the level it runs on
  kLevelMemory,  // that level's own memory bandwidth
  kLink,         // the j→i link (data fetched from the home level)
};
std::string_view RoofName(Roof r);  // "compute", "memory", "link"

// Eq. 2/5 (the classic roofline, Eq. 8 when the data is already there):
// min(P_peak, B_peak · I). Intensities <= 0 give 0.
double AttainableOnLevel(const RooflineLevel& level, double intensity);

// Eq. 7: running on level i with the data fetched from level j:
// min(P^i, B^i · I^i, B^{j,i} · I^j).
double AttainableFetched(const HierarchicalRoofline& h,
                         double intensity_compute, double intensity_home);

// The roof that binds Eq. 7 (ties go to the earlier one in enum order, so a
// kernel exactly at its ridge reads as compute-bound).
Roof BindingRoof(const HierarchicalRoofline& h, double intensity_compute,
                 double intensity_home);

// Eq. 9, turning point P1: the home-level intensity above which fetching the
// data to level i beats computing on level j, min(P^j, B^j · I^j) / B^{j,i}.
// It depends on I^j itself: while the op is memory-bound on j it is
// B^j·I^j/B^{j,i} > I^j whenever B^j > B^{j,i} (fetching never pays), and
// once compute-bound on j it is the constant P^j / B^{j,i}.
double TurningPointP1(const HierarchicalRoofline& h, double intensity_home);

// Eq. 10, turning point P2: the home-level intensity above which the op on
// level i is no longer bound by the link: min(P^i, B^i · I^i) / B^{j,i}.
double TurningPointP2(const HierarchicalRoofline& h, double intensity_compute);

// Eq. 11, balance point: the home-level intensity at which the link roof
// meets level i's memory roof, B^i · I^i / B^{j,i}. Past it, raising I^j
// (a larger batch N) gains nothing; only I^i (a larger micro-batch μ) does.
double BalanceIntensityHome(const HierarchicalRoofline& h,
                            double intensity_compute);

// Eq. 9 as a decision: true when computing on level i with the data
// fetched (Eq. 7) is faster than computing where the data is (Eq. 8), i.e.
// when I^j lies past P1 (and level i's own roofs do not undo it).
bool FetchBeatsHome(const HierarchicalRoofline& h, double intensity_compute,
                    double intensity_home);

// The balance point of an MoE FFN in CGOPipe's terms (digest §2.4): with the
// FFN's per-micro-batch GPU time t_ub (max of its HBM and compute time)
// and its per-layer host-to-device transfer time t_link, the number of
// micro-batches N/μ at which the GPU's work equals the link's:
// t_link / t_ub. Below it decode is link-bound (grow N); above it GPU-bound
// (grow μ). 0 when t_ub <= 0.
double BalanceMicroBatches(double link_seconds_per_layer,
                           double gpu_seconds_per_micro_batch);

}  // namespace tandem::planner::ml

#endif  // TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_HRM_H_
