// ScheInfer's performance model of one layer (digest §2.2–2.3): the linear
// cost lines of Eq. 3; the per-GEMM time of each of the four streams for a
// GG / CG / CC split at decode (Eq. 4) and prefill (Eq. 15); the pipeline of
// Eq. 5 as tasks on the step simulator; and what each layer of a model gives
// these equations (its GEMM shapes, sliceable bytes, GPU-only work).
//
// The paper fits α and β by regression on profiled kernels. We derive them
// from a HardwareProfile instead (the profiler's peaks), which is the same
// line "fitted" at one token count: a GEMM of T rows against an [M, H]
// weight slice is bandwidth-bound at decode sizes and compute-bound at
// prefill sizes, time = max(bytes / bandwidth, flops / peak). For a fixed T
// both terms are proportional to the slice, so the roofline IS a line in
// n_GEMM = T·M·H with β = max(bytes_per_element / (T·bandwidth), 2 / peak).
// One model per phase (decode at the batch size, prefill at the prompt
// length), as the digest recommends: a single line cannot span both regimes.
#ifndef TANDEM_COORDINATOR_PLANNER_SCHEINFER_COST_MODEL_H_
#define TANDEM_COORDINATOR_PLANNER_SCHEINFER_COST_MODEL_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/sim/step_simulator.h"

namespace tandem::planner::scheinfer {

// t = alpha + n * beta.
struct LinearCost {
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per unit of n
  double At(double n) const { return alpha + n * beta; }
};

// Eq. 3: the fitted constants of one phase.
struct CostModel {
  LinearCost gpu;       // one GPU GEMM, n = n_GEMM = T·M·H
  LinearCost cpu;       // one CPU GEMM, n = n_GEMM
  LinearCost h2d;       // one host-to-device copy, n = bytes (n_W share)
  double launch_s = 0;  // t_Launch: one kernel or copy launch on the host
};

// The GEMMs of one MLP layer (or of one MoE layer's active experts), all of
// the same size, that ScheInfer's recurrence runs in sequence.
struct GemmShape {
  int num_gemms = 0;        // n_l: 3 for a SwiGLU MLP, 3 per active expert
  double elements = 0;      // M·H: elements of one whole (unsplit) weight
  double weight_bytes = 0;  // n_W: bytes of one whole weight
  double tokens = 0;        // T: rows each GEMM multiplies (per expert for MoE)
  double n_gemm() const { return tokens * elements; }
};

// Fractions of each weight: r_GG + r_CG + r_CC = 1.
struct Split {
  double gg = 0;
  double cg = 0;
  double cc = 1;
};

// Per-GEMM time on each stream (the t's of Eq. 4 / 15). A zero means the
// stream has nothing to do for this split.
struct StreamTimes {
  double launch = 0;  // t_L   (launch stream B)
  double copy = 0;    // t_C2G (copy stream C)
  double gpu = 0;     // t_G   (GPU stream D)
  double cpu = 0;     // t_C   (CPU stream A)
};

// sgn of a share with a tolerance: 1 − gg − cg computed in floating point
// leaves ~1e-17 where the paper's share is exactly 0, and that residue must
// not buy a launch or an α.
inline constexpr double kShareEpsilon = 1e-9;
inline double Sgn(double share) { return share > kShareEpsilon ? 1.0 : 0.0; }

// Eq. 4, decode (n_g = 0):
//   t_G   = α_G·[sgn(cg)+sgn(gg)] + (cg+gg)·n_GEMM·β_G
//   t_C   = α_C·sgn(cc) + cc·n_GEMM·β_C
//   t_C2G = α_C2G·sgn(cg) + cg·n_W·β_C2G      (the sgn form of Eqs. 10–12)
//   t_L   = [2·sgn(cg) + sgn(gg)]·t_Launch    (CG: one copy + one GEMM launch)
StreamTimes DecodeStreamTimes(const CostModel& m, const GemmShape& s,
                              const Split& split);

// Eq. 15, prefill with a fraction `gpu_token_fraction` = n_g / T of the
// prompt's tokens sent through CG′ (the CC bytes copied to the GPU):
//   t′_L   = [2·sgn(cg) + 2·sgn(cc·n_g) + sgn(gg)]·t_Launch
//   t′_C2G = α_C2G·[sgn(cg) + sgn(cc·n_g)] + (cg + cc·sgn(n_g))·n_W·β_C2G
//   t′_G   = α_G·[sgn(cg)+sgn(gg)+sgn(cc·n_g)] + [T·(cg+gg) + n_g·cc]·M·H·β_G
//   t′_C   = α_C·sgn(cc·(T−n_g)) + (T−n_g)·cc·M·H·β_C
// Two readings of the paper's gaps (digest §4 item 7), chosen so that n_g = 0
// is exactly the decode-rate schedule with no extra work: the CG′ terms carry
// sgn(cc·n_g) rather than sgn(cc) (no copy and no kernel when no token uses
// CG′), and the copy moves (cg + cc)·n_W bytes, not the paper's literal n_W
// (the GG share is already resident).
StreamTimes PrefillStreamTimes(const CostModel& m, const GemmShape& s,
                               const Split& split, double gpu_token_fraction);

// The model of one phase for GEMMs of `tokens` rows with weights of
// `weight_bytes_per_element` (0.5 for 4-bit, 2 for fp16), from a profile:
//   GPU: α_G = 0 (see the .cc),
//        β_G = max(bpe / (T·gpu.memory_bandwidth), 2 / gpu.bf16_flops)
//   CPU: α_C = cpu.op_overhead_s,
//        β_C = max(bpe / (T·cpu.memory_bandwidth), 2 / cpu peak)
//   PCIe: α_C2G = link.h2d_latency_s, β_C2G = 1 / link.h2d_bandwidth per byte
//   t_Launch = gpu.launch_overhead_s
// The CPU figures are those of the profile's thread count, so a profile from
// HardwareProfile::WithCpuThreads(t) gives t threads' lines.
// FailedPrecondition without a GPU; InvalidArgument for non-positive inputs
// or missing figures.
absl::StatusOr<CostModel> CostModelFromProfile(const HardwareProfile& hw,
                                               double weight_bytes_per_element,
                                               double tokens);

// ===== Eq. 5: the pipeline of one layer on the step simulator =====
//
// ScheInfer's pipeline model as a StepGraph: the n_l
// GEMMs of one layer on the four asynchronous streams,
//   τ_L^i   = τ_L^{i−1} + t_L                      launch stream B
//   τ_C2G^i = max(τ_L^i, τ_C2G^{i−1}) + t_C2G       copy stream C
//   τ_G^i   = max(τ_C2G^i, τ_G^{i−1}) + t_G         GPU stream D
//   τ_C^i   = τ_C^{i−1} + t_C                       CPU stream A
//   t_fin   = max(τ_G^{n_l}, τ_C^{n_l}),
// which is exactly what the step simulator's in-order streams with
// dependencies compute. The closed forms of the paper's three regimes
// (Eq. 10–12) are here too, to check the simulator against and to name the
// regime a plan is in.

// The tasks one layer's GEMMs added; -1 where a stream got none.
struct MlpTasks {
  TaskId last_gpu = -1;
  TaskId last_cpu = -1;
  TaskId last_launch = -1;
};

// Appends the n_l = `num_gemms` GEMMs of one layer with per-GEMM stream times
// `t`: per GEMM a launch (t_L), a copy that waits for it (t_C2G), a GPU GEMM
// that waits for the copy, or for the launch when nothing is copied (t_G),
// and a CPU GEMM (t_C). Streams with a zero time get no task (a zero-length
// task would not move any start time). The first launch waits for
// `launch_deps`, the first CPU GEMM for `cpu_deps` (the layer's input);
// later ones follow in stream order. Names are "<label> gemm i <stream>".
MlpTasks AppendMlpTasks(StepGraph* graph, std::string_view label,
                        const StreamTimes& t, int num_gemms,
                        const std::vector<TaskId>& launch_deps,
                        const std::vector<TaskId>& cpu_deps);

// ----- The simulator's arithmetic without a graph -----
//
// The solvers evaluate t_fin thousands of times per plan (every Stage-1
// candidate, every n_g candidate, every batch size), and for MoE layers a
// graph holds 4 tasks per GEMM of up to hundreds of active experts: building
// those graphs (a named, heap-allocated task each) was most of the planner's
// time. StreamClock places tasks with exactly the step simulator's
// arithmetic — start = max(resource free, latest dependency end), end =
// start + duration, makespan = max of the ends — so a caller that places the
// same tasks in the same order gets the same doubles, bit for bit, as
// Simulate() on the graph (tests check this), for the cost of a few flops
// per task.

// The ends of the last tasks one layer's GEMMs placed (MlpTasks on a
// StreamClock); has_* is false where a stream got none.
struct MlpEnds {
  bool has_gpu = false, has_cpu = false;
  double gpu = 0, cpu = 0;
};

class StreamClock;

// AppendMlpTasks on a StreamClock: the same tasks in the same order, with the
// first launch (or, without launches, the first copy / GPU GEMM) waiting for
// `launch_ready_s` and the first CPU GEMM for `cpu_ready_s`.
MlpEnds PlaceMlpTasks(StreamClock* clock, const StreamTimes& t, int num_gemms,
                      double launch_ready_s, double cpu_ready_s);

class StreamClock {
 public:
  // Places a task of `duration_s` on `r` that may start once `ready_s` (the
  // latest end among its dependencies; 0 for none — every time is >= 0, so
  // 0 waits for nothing) has passed; returns its end.
  double Place(Resource r, double duration_s, double ready_s);
  double makespan() const { return makespan_; }
  // False once a duration was negative or not finite: Simulate() would have
  // rejected the graph, and the caller should build it to get that error.
  bool ok() const { return ok_; }

 private:
  // Runs one layer's recurrence on the free times directly.
  friend MlpEnds PlaceMlpTasks(StreamClock*, const StreamTimes&, int, double,
                               double);
  std::array<double, kNumResources> free_at_{};
  double makespan_ = 0;
  bool ok_ = true;
};

// t_fin of one layer alone (every τ^0 = 0): the step simulator's makespan of
// AppendMlpTasks's graph, computed on a StreamClock (the graph is built only
// to report a bad duration with Simulate()'s own error).
absl::StatusOr<double> SimulateMlpLayer(const StreamTimes& t, int num_gemms);

// τ_G^{n_l}: the GPU side's finish in closed form. The three regimes of the
// paper (Eq. 10–12) are one formula:
//   τ_G^{n_l} = t_L + t_C2G + t_G + (n_l − 1)·max(t_L, t_C2G, t_G).
double ClosedFormGpuFinish(const StreamTimes& t, int num_gemms);
// max(τ_G^{n_l}, τ_C^{n_l} = n_l·t_C).
double ClosedFormLayerTime(const StreamTimes& t, int num_gemms);

enum class Regime {
  kCopyBound = 1,    // Case 1: Q1 (t_L < t_C2G) and Q2 (t_G < t_C2G)
  kGpuBound = 2,     // Case 2: (Q1 and not Q2) or (not Q1 and Q3: t_L < t_G)
  kLaunchBound = 3,  // Case 3: neither Q1 nor Q3
};
// The paper's case split by Q1..Q3.
Regime ClassifyRegime(const StreamTimes& t);
std::string_view RegimeName(
    Regime r);  // "copy-bound", "GPU-bound", "launch-bound"

// ===== The layers of a model as ScheInfer sees them =====
//
// Per layer: the GEMMs its split applies to
// (a dense SwiGLU MLP, or the active routed experts of an MoE layer), the
// bytes that split divides, and the work that always stays on the GPU
// (attention and everything else that is not an MLP/expert weight; the
// paper keeps it there and we do too, KV cache included).
//
// What the split means for experts (digest §4 item 3, the paper says only
// "the same, with more GEMMs per layer"): every routed expert is sliced like
// a dense MLP, along its own intermediate dimension, at the layer's
// GG / CG / CC fractions — so the fraction is also the share of the layer's
// routed-expert bytes, as LayerPolicy documents. Per decode step only the
// active experts run: their count is the expected number of distinct experts
// B tokens route to (ModelCost::ExpectedActiveExperts, rounded to a whole
// expert), each multiplying B·k / active rows; inactive experts' CG slices
// are not copied (the router runs first, on the GPU) and their CC slices are
// not computed. n_l is 3 GEMMs (gate, up, down; gate and up sliced together)
// per active expert. The router and a shared expert stay on the GPU.

// GPU-only work: one kernel per op, each at its roofline time.
struct FixedGpuWork {
  double gpu_s = 0;
  int kernels = 0;
};

struct LayerWork {
  bool moe = false;
  double sliceable_bytes = 0;  // n_m: dense MLP, or every routed expert
  GemmShape shape;             // the GEMMs the split applies to, this phase
  FixedGpuWork fixed;          // attention, norms, router, shared expert
};

// A GPU op at its roofline: max(bytes / bandwidth, flops / peak).
double GpuRooflineSeconds(const OpCost& op, const HardwareProfile& hw);
FixedGpuWork GpuWork(const std::vector<OpCost>& ops, const HardwareProfile& hw);

// The sliceable bytes of a layer (n_m).
double SliceableBytes(const ModelCost& m, int64_t layer);

// Layer `layer` in one decode step of `batch` sequences at `context` keys.
LayerWork DecodeLayerWork(const ModelCost& m, const HardwareProfile& hw,
                          int64_t layer, int64_t batch, double context);
// Layer `layer` in the prefill of one prompt of `prompt_tokens` tokens.
LayerWork PrefillLayerWork(const ModelCost& m, const HardwareProfile& hw,
                           int64_t layer, int64_t prompt_tokens);

// Activations and scratch the GPU holds for a step of `tokens` tokens with
// `logit_rows` rows of logits: a few hidden-size vectors and the widest
// intermediate per token (one layer's live buffers; layers reuse them),
// doubled for the allocator's slack, plus fp32 logits.
double ActivationBytes(const ModelCost& m, double tokens, double logit_rows);

}  // namespace tandem::planner::scheinfer

#endif  // TANDEM_COORDINATOR_PLANNER_SCHEINFER_COST_MODEL_H_
