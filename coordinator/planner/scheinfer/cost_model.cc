#include "coordinator/planner/scheinfer/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::planner::scheinfer {

StreamTimes DecodeStreamTimes(const CostModel& m, const GemmShape& s,
                              const Split& split) {
  const double n = s.n_gemm();
  StreamTimes t;
  const double s_cg = Sgn(split.cg), s_gg = Sgn(split.gg), s_cc = Sgn(split.cc);
  const double on_gpu = s_cg * split.cg + s_gg * split.gg;
  t.gpu = (s_cg + s_gg) * m.gpu.alpha + on_gpu * n * m.gpu.beta;
  t.cpu = s_cc * (m.cpu.alpha + split.cc * n * m.cpu.beta);
  t.copy = s_cg * (m.h2d.alpha + split.cg * s.weight_bytes * m.h2d.beta);
  t.launch = (2 * s_cg + s_gg) * m.launch_s;
  return t;
}

StreamTimes PrefillStreamTimes(const CostModel& m, const GemmShape& s,
                               const Split& split, double gpu_token_fraction) {
  const double phi = std::clamp(gpu_token_fraction, 0.0, 1.0);
  const double e = s.elements;
  const double tokens = s.tokens;
  const double s_cg = Sgn(split.cg), s_gg = Sgn(split.gg), s_cc = Sgn(split.cc);
  // CG′ exists when some CC share is streamed for some tokens; the CPU keeps
  // work while some tokens stay on it. phi is a fraction of whole tokens, so
  // phi·T >= 1 whenever phi > 0 is meaningful; the tolerance only strips
  // rounding residue.
  const double s_cgp = s_cc * Sgn(phi);
  const double s_cpu = s_cc * Sgn(1.0 - phi);
  StreamTimes t;
  t.launch = (2 * s_cg + 2 * s_cgp + s_gg) * m.launch_s;
  t.copy = (s_cg + s_cgp) * m.h2d.alpha +
           (s_cg * split.cg + s_cgp * split.cc) * s.weight_bytes * m.h2d.beta;
  t.gpu = (s_cg + s_gg + s_cgp) * m.gpu.alpha +
          (tokens * (s_cg * split.cg + s_gg * split.gg) +
           s_cgp * phi * tokens * split.cc) *
              e * m.gpu.beta;
  t.cpu =
      s_cpu * (m.cpu.alpha + (1.0 - phi) * tokens * split.cc * e * m.cpu.beta);
  return t;
}

absl::StatusOr<CostModel> CostModelFromProfile(const HardwareProfile& hw,
                                               double weight_bytes_per_element,
                                               double tokens) {
  if (!hw.has_gpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ScheInfer needs a GPU; profile '", hw.name, "' has none"));
  }
  if (!(weight_bytes_per_element > 0) ||
      !std::isfinite(weight_bytes_per_element)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight bytes per element must be positive, got ",
                     weight_bytes_per_element));
  }
  if (!(tokens > 0) || !std::isfinite(tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM rows must be positive, got ", tokens));
  }
  const double cpu_peak =
      hw.cpu.bf16_flops > 0 ? hw.cpu.bf16_flops : hw.cpu.f32_flops;
  struct Need {
    double value;
    const char* field;
  };
  for (const Need& need :
       {Need{hw.gpu.memory_bandwidth, "gpu.memory_bandwidth"},
        Need{hw.gpu.bf16_flops, "gpu.bf16_flops"},
        Need{hw.cpu.memory_bandwidth, "cpu.memory_bandwidth"},
        Need{cpu_peak, "cpu.bf16_flops/f32_flops"},
        Need{hw.link.h2d_bandwidth, "link.h2d_bandwidth"}}) {
    if (!(need.value > 0) || !std::isfinite(need.value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ScheInfer cost model: profile '", hw.name,
                       "' needs a positive ", need.field));
    }
  }
  const double bpe = weight_bytes_per_element;
  CostModel m;
  // α_G: the GPU-side fixed cost of a GEMM kernel. The profile's one launch
  // figure (launch_overhead_s) is the host-side cost the launch stream pays
  // (t_Launch); charging it again as α_G would count every launch twice,
  // because a GPU GEMM already waits for its launch in the recurrence. The
  // paper's own fits put α_G 2–3 orders of magnitude below t_Launch (Table I
  // testbed A: 1.0e-7 s vs 4.4e-5 s), so we take α_G = 0. Hand-made models
  // (tests, a future per-kernel profiler) can set it.
  m.gpu.alpha = 0;
  m.gpu.beta = std::max(bpe / (tokens * hw.gpu.memory_bandwidth),
                        2.0 / hw.gpu.bf16_flops);
  m.cpu.alpha = hw.cpu.op_overhead_s;
  // CPU GEMMs read 4-/8-bit weights and compute in bf16 after dequantizing
  // (what cpu_worker's prefill path does), so the compute roof is the bf16
  // (or f32 where bf16 is missing) figure whatever the storage width.
  m.cpu.beta =
      std::max(bpe / (tokens * hw.cpu.memory_bandwidth), 2.0 / cpu_peak);
  m.h2d.alpha = hw.link.h2d_latency_s;
  m.h2d.beta = 1.0 / hw.link.h2d_bandwidth;
  m.launch_s = hw.gpu.launch_overhead_s;
  return m;
}

// ----- Eq. 5 -----

MlpTasks AppendMlpTasks(StepGraph* graph, std::string_view label,
                        const StreamTimes& t, int num_gemms,
                        const std::vector<TaskId>& launch_deps,
                        const std::vector<TaskId>& cpu_deps) {
  MlpTasks out;
  // This absl::StrCat predates std::string_view.
  const std::string prefix(label);
  // Eq. 5's index range is off by one in the paper (digest §4 item 5); we
  // read it as GEMMs 1..n_l after τ^0 = 0, i.e. n_l GEMMs.
  for (int i = 0; i < num_gemms; ++i) {
    TaskId launch = -1, copy = -1;
    if (t.launch > 0) {
      launch = graph->Add(absl::StrCat(prefix, " gemm ", i, " launch"),
                          Resource::kLaunch, t.launch,
                          i == 0 ? launch_deps : std::vector<TaskId>{});
      out.last_launch = launch;
    }
    // A copy or a GPU GEMM starts only after its own launch has been issued
    // (and, on the first GEMM without any launch, after the layer's start).
    std::vector<TaskId> issued =
        launch >= 0 ? std::vector<TaskId>{launch}
                    : (i == 0 ? launch_deps : std::vector<TaskId>{});
    if (t.copy > 0) {
      copy = graph->Add(absl::StrCat(prefix, " gemm ", i, " copy"),
                        Resource::kH2d, t.copy, issued);
    }
    if (t.gpu > 0) {
      // A CG GEMM starts only after its weight copy.
      out.last_gpu =
          graph->Add(absl::StrCat(prefix, " gemm ", i, " gpu"), Resource::kGpu,
                     t.gpu, copy >= 0 ? std::vector<TaskId>{copy} : issued);
    }
    if (t.cpu > 0) {
      out.last_cpu =
          graph->Add(absl::StrCat(prefix, " gemm ", i, " cpu"), Resource::kCpu,
                     t.cpu, i == 0 ? cpu_deps : std::vector<TaskId>{});
    }
  }
  return out;
}

double StreamClock::Place(Resource r, double duration_s, double ready_s) {
  const int i = static_cast<int>(r);
  if (!std::isfinite(duration_s) || duration_s < 0) ok_ = false;
  // The order of Simulate(): the resource's free time, then the dependency.
  const double start = std::max(free_at_[i], ready_s);
  const double end = start + duration_s;
  free_at_[i] = end;
  makespan_ = std::max(makespan_, end);
  return end;
}

MlpEnds PlaceMlpTasks(StreamClock* clock, const StreamTimes& t, int num_gemms,
                      double launch_ready_s, double cpu_ready_s) {
  // AppendMlpTasks task for task (keep the two in step), on the four
  // streams' free times held in locals: this loop is most of what a plan
  // costs. Each stream's ends only grow (start >= its free time, durations
  // >= 0), so the makespan over the layer's tasks is the max of the streams'
  // final free times, the same double as the max over every end.
  MlpEnds out;
  if (num_gemms <= 0) return out;
  const bool launch = t.launch > 0, copy = t.copy > 0, gpu = t.gpu > 0,
             cpu = t.cpu > 0;
  // The durations Simulate() would check (a stream time <= 0 adds no task;
  // NaN is not > 0).
  for (bool placed_ok :
       {!launch || std::isfinite(t.launch), !copy || std::isfinite(t.copy),
        !gpu || std::isfinite(t.gpu), !cpu || std::isfinite(t.cpu)}) {
    if (!placed_ok) clock->ok_ = false;
  }
  auto& free_at = clock->free_at_;
  double fl = free_at[static_cast<int>(Resource::kLaunch)];
  double fc = free_at[static_cast<int>(Resource::kH2d)];
  double fg = free_at[static_cast<int>(Resource::kGpu)];
  double fp = free_at[static_cast<int>(Resource::kCpu)];
  // GEMM 0 waits for the layer's inputs; later GEMMs have no dependencies of
  // their own beyond their launch / copy, so `ready` is 0 there and
  // max(free, 0) = free (every time is >= 0).
  for (int i = 0; i < num_gemms; ++i) {
    double issued = i == 0 ? launch_ready_s : 0;
    if (launch) {
      fl = std::max(fl, issued) + t.launch;
      issued = fl;
    }
    double gpu_ready = issued;
    if (copy) {
      fc = std::max(fc, issued) + t.copy;
      gpu_ready = fc;
    }
    if (gpu) fg = std::max(fg, gpu_ready) + t.gpu;
    if (cpu) fp = std::max(fp, i == 0 ? cpu_ready_s : 0) + t.cpu;
  }
  free_at[static_cast<int>(Resource::kLaunch)] = fl;
  free_at[static_cast<int>(Resource::kH2d)] = fc;
  free_at[static_cast<int>(Resource::kGpu)] = fg;
  free_at[static_cast<int>(Resource::kCpu)] = fp;
  clock->makespan_ = std::max({clock->makespan_, fl, fc, fg, fp});
  out.has_gpu = gpu;
  out.gpu = fg;
  out.has_cpu = cpu;
  out.cpu = fp;
  return out;
}

absl::StatusOr<double> SimulateMlpLayer(const StreamTimes& t, int num_gemms) {
  StreamClock clock;
  PlaceMlpTasks(&clock, t, num_gemms, 0, 0);
  if (clock.ok()) return clock.makespan();
  StepGraph g;
  AppendMlpTasks(&g, "mlp", t, num_gemms, {}, {});
  TANDEM_ASSIGN_OR_RETURN(SimResult r, Simulate(g));
  return r.makespan_s;
}

double ClosedFormGpuFinish(const StreamTimes& t, int num_gemms) {
  if (num_gemms <= 0) return 0;
  // Without any GPU work there is no GPU finish, however long the launches
  // (a launch-only layer does not exist: launches come with GPU work).
  if (t.gpu <= 0 && t.copy <= 0) return 0;
  const double slowest = std::max({t.launch, t.copy, t.gpu});
  return t.launch + t.copy + t.gpu + (num_gemms - 1) * slowest;
}

double ClosedFormLayerTime(const StreamTimes& t, int num_gemms) {
  return std::max(ClosedFormGpuFinish(t, num_gemms),
                  std::max(num_gemms, 0) * t.cpu);
}

Regime ClassifyRegime(const StreamTimes& t) {
  const bool q1 = t.launch < t.copy;
  const bool q2 = t.gpu < t.copy;
  const bool q3 = t.launch < t.gpu;
  if (q1 && q2) return Regime::kCopyBound;
  if ((q1 && !q2) || (!q1 && q3)) return Regime::kGpuBound;
  return Regime::kLaunchBound;
}

std::string_view RegimeName(Regime r) {
  switch (r) {
    case Regime::kCopyBound:
      return "copy-bound";
    case Regime::kGpuBound:
      return "GPU-bound";
    case Regime::kLaunchBound:
      return "launch-bound";
  }
  return "unknown";
}

// ----- Layers -----
namespace {

bool IsSliced(OpKind k) {
  return k == OpKind::kDenseMlp || k == OpKind::kRoutedExperts;
}

// The GEMM shape of a layer for `tokens` rows entering it.
GemmShape ShapeFor(const ModelCost& m, int64_t layer, double tokens) {
  const ModelConfig& c = m.config();
  const double bpe = m.options().weight_bytes_per_element;
  GemmShape s;
  if (c.IsMoeLayer(layer)) {
    const double e = static_cast<double>(c.num_experts);
    const double k = static_cast<double>(c.num_experts_per_tok);
    // A whole expert either runs or not; round the expectation, at least one.
    const double active =
        std::clamp(std::round(m.ExpectedActiveExperts(tokens)), 1.0, e);
    s.num_gemms = 3 * static_cast<int>(active);
    s.weight_bytes = m.expert_bytes() / 3;
    // Rows per active expert keep the layer's FLOPs (tokens·k routed rows).
    s.tokens = tokens * k / active;
  } else {
    s.num_gemms = 3;
    s.weight_bytes = static_cast<double>(c.hidden_size) *
                     static_cast<double>(c.intermediate_size) * bpe;
    s.tokens = tokens;
  }
  s.elements = s.weight_bytes / bpe;
  return s;
}

LayerWork Build(const ModelCost& m, const HardwareProfile& hw, int64_t layer,
                double tokens, const std::vector<OpCost>& ops) {
  LayerWork w;
  w.moe = m.config().IsMoeLayer(layer);
  w.sliceable_bytes = SliceableBytes(m, layer);
  w.shape = ShapeFor(m, layer, tokens);
  std::vector<OpCost> fixed;
  for (const OpCost& op : ops) {
    if (!IsSliced(op.kind)) fixed.push_back(op);
  }
  w.fixed = GpuWork(fixed, hw);
  return w;
}

}  // namespace

double GpuRooflineSeconds(const OpCost& op, const HardwareProfile& hw) {
  const double memory =
      hw.gpu.memory_bandwidth > 0 ? op.bytes() / hw.gpu.memory_bandwidth : 0;
  const double compute =
      hw.gpu.bf16_flops > 0 ? op.flops / hw.gpu.bf16_flops : 0;
  return std::max(memory, compute);
}

FixedGpuWork GpuWork(const std::vector<OpCost>& ops,
                     const HardwareProfile& hw) {
  FixedGpuWork w;
  for (const OpCost& op : ops) {
    w.gpu_s += GpuRooflineSeconds(op, hw);
    ++w.kernels;
  }
  return w;
}

double SliceableBytes(const ModelCost& m, int64_t layer) {
  const ModelConfig& c = m.config();
  if (c.IsMoeLayer(layer))
    return static_cast<double>(c.num_experts) * m.expert_bytes();
  return 3.0 * static_cast<double>(c.hidden_size) *
         static_cast<double>(c.intermediate_size) *
         m.options().weight_bytes_per_element;
}

LayerWork DecodeLayerWork(const ModelCost& m, const HardwareProfile& hw,
                          int64_t layer, int64_t batch, double context) {
  return Build(m, hw, layer, static_cast<double>(batch),
               m.DecodeLayer(layer, batch, context));
}

LayerWork PrefillLayerWork(const ModelCost& m, const HardwareProfile& hw,
                           int64_t layer, int64_t prompt_tokens) {
  return Build(m, hw, layer, static_cast<double>(prompt_tokens),
               m.PrefillLayer(layer, 1, prompt_tokens));
}

double ActivationBytes(const ModelCost& m, double tokens, double logit_rows) {
  return m.StepActivationBytes(tokens, logit_rows, 2, m.options().activation_bytes_per_element);
}

}  // namespace tandem::planner::scheinfer
