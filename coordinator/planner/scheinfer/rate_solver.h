// ScheInfer's solvers: Stage 2's greedy GPU memory assignment (at the end
// of this file) and two one-dimensional solves by breakpoints (digest §2.4
// and §2.6): Stage 1 picks r_CG for a fixed r_GG at decode; token assignment
// picks n_g for a prefill at the decode rates. In both, every stream time is
// linear in the unknown x between the sgn jumps at the ends of its range, so
//   t_fin(x) = max(τ_C, t_L + t_C2G + t_G + (n_l − 1)·max(t_L, t_C2G, t_G))
// is the upper envelope of four lines in x (three GPU-side case lines and
// the CPU line) and its minimum over the open range lies where two of them
// cross. The candidates are therefore the range ends and the pairwise
// crossings: t_L = t_C2G, t_G = t_C2G, t_L = t_G (the case boundaries) and
// each case line = τ_C (CPU and GPU finish together) — the paper's set X,
// with the balance root solved once per case formula. The best candidate by
// simulation (Eq. 4 + Eq. 5, the step simulator's arithmetic) is kept. Only
// candidates whose closed-form time (Eq. 10–12, equal to the simulation up
// to rounding) is within 1e-9 of the best closed-form time are simulated:
// the others can neither win nor tie, so the pick is the one simulating
// every candidate would make, at a fraction of the cost.
#ifndef TANDEM_COORDINATOR_PLANNER_SCHEINFER_RATE_SOLVER_H_
#define TANDEM_COORDINATOR_PLANNER_SCHEINFER_RATE_SOLVER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/scheinfer/cost_model.h"

namespace tandem::planner::scheinfer {

// a + b·x.
struct Line {
  double a = 0;
  double b = 0;
  double At(double x) const { return a + b * x; }
};

// The four per-GEMM stream times as lines in the unknown, valid strictly
// inside its range (where every sgn is fixed).
struct StreamLines {
  Line launch, copy, gpu, cpu;
};

// The breakpoints of t_fin inside (lo, hi) plus lo and hi, sorted, unique.
std::vector<double> BreakpointCandidates(const StreamLines& lines,
                                         int num_gemms, double lo, double hi);

// --- Stage 1 (Eqs. 6–13) ---

struct Stage1Result {
  double r_cg = 0;
  double t_fin = 0;                    // simulated layer time at the optimum
  Regime regime = Regime::kCopyBound;  // of the optimum's stream times
  int candidates = 0;                  // |X| after filtering to [0, 1 − r_gg]
};

// Stage 1's lines in x = r_CG on (0, 1 − r_GG):
//   t_L = (2 + sgn gg)·t_Launch,  t_C2G = α_C2G + x·n_W·β_C2G,
//   t_G = α_G·(1 + sgn gg) + (gg + x)·n·β_G,  t_C = α_C + (1 − gg − x)·n·β_C.
StreamLines Stage1Lines(const CostModel& m, const GemmShape& s, double r_gg);

// The best r_CG for a fixed r_GG in [0, 1]. InvalidArgument for r_gg out of
// range or a shape without GEMMs.
absl::StatusOr<Stage1Result> SolveStage1(const CostModel& m, const GemmShape& s,
                                         double r_gg);

// --- Token assignment for prefill (Eq. 15) ---

// Layers that share one prefill model, shape and decode split (e.g. all
// dense layers with the same r_GG): their MLP time counts `count` times.
struct PrefillGroup {
  CostModel model;  // fitted at the prompt's rows (see CostModelFromProfile)
  GemmShape shape;  // tokens = the rows each GEMM sees for the whole prompt
  Split split;      // the decode-optimal split, kept for prefill
  double count = 1;
};

struct TokenAssignment {
  int64_t gpu_tokens = 0;       // n_g
  double mlp_seconds = 0;       // Σ count·t_fin over the groups at n_g
  double cpu_only_seconds = 0;  // the same at n_g = 0 (token assignment off)
};

// Prefill lines in x = φ = n_g / T on (0, 1) for one group.
StreamLines PrefillLines(const CostModel& m, const GemmShape& s,
                         const Split& split);

// One n_g for the whole prompt of `prompt_tokens` tokens (the paper solves
// one per prompt; with Stage 2's per-layer splits the objective is the sum
// over layers, itself piecewise linear, so the union of the groups'
// breakpoints holds its minimum). n_g is an integer: each real breakpoint
// is tried rounded down and up. Ties go to the smaller n_g (less copying).
absl::StatusOr<TokenAssignment> SolvePrefillTokens(
    const std::vector<PrefillGroup>& groups, int64_t prompt_tokens);

// ===== Stage 2 (digest §2.5, Eq. 14) =====
// Give the GPU memory left for MLP/expert weights to the layers, greedily,
// by time saved per extra byte.
//
// r_GG of layer j takes values on the grid v_i = i / n_G. With
// f_j(v) = t*_fin of layer j at r_GG = v (Stage 1's optimum), the score of
// moving layer j from its current level v_pre to v_i > v_pre is
//   s = [f_j(v_pre) − f_j(v_i)] / [(v_i − v_pre) · n_m^j]
// (n_m^j: the layer's sliceable weight bytes, so (v_i − v_pre)·n_m^j is the
// extra GPU memory). Each iteration applies the best-scoring move that fits
// in what is left of the budget; the loop stops when no fitting move saves
// time. The choices the paper leaves open (digest §4 item 6):
//   - n_G = 32 by default (r_GG steps of ~3%: for 4-bit LLaMA-2-70B, 11 MB
//     of a 352 MB layer, fine enough to spend a budget to within a step and
//     33 Stage-1 solves per layer class, which is cheap);
//   - a layer's r_GG only grows (v_i > v_pre): memory once given is kept;
//   - a best candidate that does not fit is skipped for the best one that
//     does (so a big jump to v = 1 does not end the loop while smaller steps
//     still fit);
//   - stop when the best fitting score is <= 0 (higher r_GG is not always
//     faster; non-convex f is handled because every v_i > v_pre is scored,
//     not only the next step);
//   - ties go to the first layer, then the smallest level.
// Layers with identical tables and bytes (all layers of one kind) standing
// at the same level are scored once per iteration, for the first of them:
// the later ones could only tie it and lose the tie, so the moves are
// exactly those of scoring every layer, and an iteration costs
// O(layers + distinct (kind, level) pairs · n_G) rather than O(layers · n_G).

inline constexpr int kDefaultGridSteps = 32;  // n_G

struct Stage2Layer {
  double sliceable_bytes = 0;  // n_m: bytes that r_GG = 1 puts on the GPU
  // f[i] = t*_fin at r_GG = i / n_G, i = 0..n_G (n_G = f.size() − 1). Layers
  // of one shape share one table, so this is a pointer-free copy per layer.
  std::vector<double> f;
};

struct Stage2Result {
  std::vector<int> level;  // per layer: r_GG = level / n_G
  double gg_bytes = 0;     // Σ level/n_G · n_m
  double total_time = 0;   // Σ f_j(level_j)
  int moves = 0;           // greedy iterations applied
};

// The GG bytes of `level` steps of a layer: level / n_G · n_m, computed the
// same way everywhere so that the budget check and the reported bytes agree.
double LevelBytes(const Stage2Layer& layer, int level);

// InvalidArgument when tables are empty or differ in length, or the budget
// or a byte count is negative or not finite.
absl::StatusOr<Stage2Result> AssignGpuMemory(
    const std::vector<Stage2Layer>& layers, double budget_bytes);

}  // namespace tandem::planner::scheinfer

#endif  // TANDEM_COORDINATOR_PLANNER_SCHEINFER_RATE_SOLVER_H_
