#include "coordinator/planner/scheinfer/scheinfer_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/planner/scheinfer/cost_model.h"
#include "coordinator/planner/scheinfer/rate_solver.h"

namespace tandem::planner {
namespace scheinfer {
namespace {

constexpr double kGB = 1e9;

absl::Status CheckInput(const PlanInput& in) {
  if (in.model == nullptr || in.hardware == nullptr || in.workload == nullptr) {
    return absl::InvalidArgumentError(
        "ScheInfer: the plan input needs a model, hardware and workload");
  }
  TANDEM_RETURN_IF_ERROR(in.workload->Validate());
  if (!in.hardware->has_gpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ScheInfer needs a GPU; machine '", in.hardware->name, "' has none"));
  }
  return absl::OkStatus();
}

struct LayerStep {
  LayerWork work;
  StreamTimes mlp;
};

// One step of every layer: the embedding, then per layer its GPU-only work
// (attention, norms, router) and its MLP/experts on ScheInfer's four streams,
// then the final norm and LM head. Each layer starts when the previous one
// has finished on both the GPU and the CPU: ScheInfer's recurrence starts
// every layer at τ^0 = 0, the host needs Y^CC back before the next layer's
// attention, and this bounds the CG copies in flight to one layer's (the
// staging buffer). Within a layer the MLP's copies may start while attention
// runs (they need only their launch), except in MoE layers, whose copies
// wait for the router: only the routed experts' slices are copied.
absl::StatusOr<std::pair<StepGraph, SimResult>> SimulateLayers(
    const std::vector<LayerStep>& layers, const FixedGpuWork& head,
    const FixedGpuWork& tail, double launch_s) {
  StepGraph g;
  std::vector<TaskId> prev;
  auto fixed = [&](const std::string& name, const FixedGpuWork& w) {
    const TaskId l =
        g.Add(name + " launch", Resource::kLaunch, w.kernels * launch_s, prev);
    return std::make_pair(l, g.Add(name, Resource::kGpu, w.gpu_s, {l}));
  };
  prev = {fixed("embedding", head).second};
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerStep& s = layers[i];
    const std::string label = absl::StrCat("L", i);
    auto [attn_launch, attn] = fixed(label + " attention", s.work.fixed);
    const MlpTasks mlp =
        AppendMlpTasks(&g, label + (s.work.moe ? " experts" : " mlp"), s.mlp,
                       s.work.shape.num_gemms,
                       s.work.moe ? std::vector<TaskId>{attn}
                                  : std::vector<TaskId>{attn_launch},
                       {attn});
    prev = {mlp.last_gpu >= 0 ? mlp.last_gpu : attn};
    if (mlp.last_cpu >= 0) prev.push_back(mlp.last_cpu);
  }
  fixed("final norm + lm_head", tail);
  TANDEM_ASSIGN_OR_RETURN(SimResult r, Simulate(g));
  return std::make_pair(std::move(g), std::move(r));
}

FixedGpuWork HeadWork(const ModelCost& m, const HardwareProfile& hw,
                      int64_t tokens, int64_t logit_rows) {
  const std::vector<OpCost> ops = m.HeadAndTail(tokens, logit_rows);
  return GpuWork({ops[0]}, hw);
}
FixedGpuWork TailWork(const ModelCost& m, const HardwareProfile& hw,
                      int64_t tokens, int64_t logit_rows) {
  const std::vector<OpCost> ops = m.HeadAndTail(tokens, logit_rows);
  return GpuWork({ops[1], ops[2]}, hw);
}

// The makespan SimulateLayers would report, computed on a StreamClock: the
// same tasks in the same order, so the same double, without building a
// graph of (for a large MoE at batch 64) tens of thousands of named tasks.
// Only when a duration is bad is the graph built, for Simulate()'s error.
absl::StatusOr<double> StepSeconds(const std::vector<LayerStep>& layers,
                                   const FixedGpuWork& head,
                                   const FixedGpuWork& tail, double launch_s) {
  // Mirrors SimulateLayers task for task; keep the two in step.
  StreamClock clock;
  // SimulateLayers' `prev` as a time: the latest end among the tasks the
  // next launch waits for (0: none, before the embedding).
  double prev = 0;
  struct Ends {
    double launch, gpu;
  };
  auto fixed = [&](const FixedGpuWork& w) {
    const double l = clock.Place(Resource::kLaunch, w.kernels * launch_s, prev);
    return Ends{l, clock.Place(Resource::kGpu, w.gpu_s, l)};
  };
  prev = fixed(head).gpu;
  for (const LayerStep& s : layers) {
    const Ends attn = fixed(s.work.fixed);
    const MlpEnds mlp =
        PlaceMlpTasks(&clock, s.mlp, s.work.shape.num_gemms,
                      s.work.moe ? attn.gpu : attn.launch, attn.gpu);
    prev = mlp.has_gpu ? mlp.gpu : attn.gpu;
    if (mlp.has_cpu) prev = std::max(prev, mlp.cpu);
  }
  fixed(tail);
  if (clock.ok()) return clock.makespan();
  TANDEM_ASSIGN_OR_RETURN(auto sim,
                          SimulateLayers(layers, head, tail, launch_s));
  return sim.second.makespan_s;
}

// Layer classes: 0 = dense MLP, 1 = MoE experts. Layers of one class share
// their GEMM shapes, bytes and cost lines, so Stage 1 runs once per class.
constexpr int kNumClasses = 2;

// What PlanBatch derives from the input that does not depend on the batch
// size: PlanScheInfer computes it once and reuses it for every batch it
// tries. Figures whose derivation can fail keep their status, reported
// where PlanBatch has always reported it (after the memory check).
struct BatchInvariant {
  double sliceable_total = 0, sliceable_max = 0;
  double resident = 0;             // weights that stay on the GPU
  std::vector<int> cls;            // per layer
  std::vector<LayerWork> prefill;  // per layer, one prompt of prompt_len
  absl::StatusOr<CostModel> prefill_model[kNumClasses];  // at its first layer
  FixedGpuWork prefill_head, prefill_tail;
};

BatchInvariant Invariant(const PlanInput& in) {
  const ModelCost& m = *in.model;
  const HardwareProfile& hw = *in.hardware;
  const Workload& w = *in.workload;
  const int64_t layers = m.config().num_layers;
  BatchInvariant v;
  for (int64_t l = 0; l < layers; ++l) {
    v.sliceable_total += SliceableBytes(m, l);
    v.sliceable_max = std::max(v.sliceable_max, SliceableBytes(m, l));
  }
  v.resident = m.total_weight_bytes() - v.sliceable_total;
  bool present[kNumClasses] = {};
  for (int64_t l = 0; l < layers; ++l) {
    v.prefill.push_back(PrefillLayerWork(m, hw, l, w.prompt_len));
    const int c = v.prefill[l].moe ? 1 : 0;
    v.cls.push_back(c);
    if (!present[c]) {
      present[c] = true;
      v.prefill_model[c] = CostModelFromProfile(
          hw, m.options().weight_bytes_per_element, v.prefill[l].shape.tokens);
    }
  }
  v.prefill_head = HeadWork(m, hw, w.prompt_len, 1);
  v.prefill_tail = TailWork(m, hw, w.prompt_len, 1);
  return v;
}

// A batch's plan and what building its decode graph needs.
struct SolvedBatch {
  BatchPlan plan;
  std::vector<LayerStep> decode_steps;
  FixedGpuWork head, tail;
};

// Builds and simulates the decode step's graph of a solved batch (the plan's
// decode_step, decode_sim).
absl::Status BuildDecodeGraph(const HardwareProfile& hw, SolvedBatch* s) {
  TANDEM_ASSIGN_OR_RETURN(auto decode,
                          SimulateLayers(s->decode_steps, s->head, s->tail,
                                         hw.gpu.launch_overhead_s));
  s->plan.decode_step = std::move(decode.first);
  s->plan.decode_sim = std::move(decode.second);
  return absl::OkStatus();
}

// PlanBatch's work, with the batch-independent part given. Without `full`
// the decode graph (decode_step, decode_sim) and prefill_one_cpu_only_s are
// left out: PlanScheInfer needs neither to compare batches, and builds the
// graph of the batch it picks.
absl::StatusOr<SolvedBatch> SolveBatch(const PlanInput& in,
                                       const BatchInvariant& inv, int64_t batch,
                                       const PlanOptions& options, bool full) {
  if (batch < 1)
    return absl::InvalidArgumentError("ScheInfer: batch must be at least 1");
  if (options.grid_steps < 1)
    return absl::InvalidArgumentError("ScheInfer: n_G must be >= 1");
  const ModelCost& m = *in.model;
  const HardwareProfile& hw = *in.hardware;
  const Workload& w = *in.workload;
  const ModelConfig& c = m.config();
  const int64_t layers = c.num_layers;
  const double bpe = m.options().weight_bytes_per_element;
  const double b = static_cast<double>(batch);

  // --- Memory: what must stay on the GPU whatever the split ---
  const double sliceable_total = inv.sliceable_total;
  const double sliceable_max = inv.sliceable_max;
  const double resident = inv.resident;
  const double kv = b * static_cast<double>(w.longest_prompt() + w.gen_len) *
                    m.kv_bytes_per_token();
  const double act =
      std::max(ActivationBytes(m, static_cast<double>(w.longest_prompt()), 1),
               ActivationBytes(m, b, b));
  const double gpu_memory = static_cast<double>(hw.gpu.memory_bytes);
  const double free = gpu_memory - resident - kv - act;
  SolvedBatch solved;
  BatchPlan& p = solved.plan;
  p.batch = batch;

  // The staging buffer for streamed weights is one layer's sliceable bytes:
  // enough for the decode CG slices and for a prefill's CG + CG′ (all of a
  // layer's host-resident share) alike. It is reserved before Stage 2 (the
  // CG shares are not known yet) unless everything fits without it. In that
  // case a plan that still streams needs at most max_l (1 − gg_l)·n_m_l of
  // staging, which is at most the Σ_l (1 − gg_l)·n_m_l Stage 2 left unspent,
  // so the total still fits.
  double staging_reserve = 0;
  if (free >= sliceable_total) {
    p.gg_budget_bytes = sliceable_total;
  } else {
    staging_reserve = sliceable_max;
    p.gg_budget_bytes = free - staging_reserve;
  }
  if (p.gg_budget_bytes < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("ScheInfer, batch %d: the GPU (%.1f GB) cannot hold "
                        "the resident weights (attention, "
                        "embeddings: %.1f GB), the KV cache (%.2f GB), "
                        "activations (%.2f GB) and a staging "
                        "buffer for one layer's streamed weights (%.2f GB)",
                        batch, gpu_memory / kGB, resident / kGB, kv / kGB,
                        act / kGB, staging_reserve / kGB));
  }

  // --- Per-layer work; layers of one kind (dense / MoE) share their shapes ---
  const double context = w.mean_decode_context();
  std::vector<LayerWork> decode_work;
  const std::vector<LayerWork>& prefill_work = inv.prefill;
  for (int64_t l = 0; l < layers; ++l) {
    decode_work.push_back(DecodeLayerWork(m, hw, l, batch, context));
  }
  auto cls = [&](int64_t l) { return inv.cls[l]; };
  struct ClassTables {
    bool present = false;
    CostModel decode, prefill;
    std::vector<double> f, r_cg;
  };
  ClassTables tables[kNumClasses];
  const int n_g_steps = options.grid_steps;
  for (int64_t l = 0; l < layers; ++l) {
    ClassTables& t = tables[cls(l)];
    if (t.present) continue;
    t.present = true;
    TANDEM_ASSIGN_OR_RETURN(
        t.decode, CostModelFromProfile(hw, bpe, decode_work[l].shape.tokens));
    TANDEM_ASSIGN_OR_RETURN(t.prefill, inv.prefill_model[cls(l)]);
    for (int i = 0; i <= n_g_steps; ++i) {
      const double r_gg = static_cast<double>(i) / n_g_steps;
      TANDEM_ASSIGN_OR_RETURN(
          Stage1Result s1, SolveStage1(t.decode, decode_work[l].shape, r_gg));
      t.f.push_back(s1.t_fin);
      t.r_cg.push_back(s1.r_cg);
    }
  }

  // --- Stage 2 ---
  std::vector<Stage2Layer> s2(layers);
  for (int64_t l = 0; l < layers; ++l) {
    s2[l].sliceable_bytes = decode_work[l].sliceable_bytes;
    s2[l].f = tables[cls(l)].f;
  }
  TANDEM_ASSIGN_OR_RETURN(Stage2Result assigned,
                          AssignGpuMemory(s2, p.gg_budget_bytes));
  p.levels = assigned.level;
  p.gg_bytes = assigned.gg_bytes;
  p.all_gg = true;
  std::map<Regime, int> regimes;
  std::vector<LayerStep> decode_steps(layers);
  for (int64_t l = 0; l < layers; ++l) {
    const ClassTables& t = tables[cls(l)];
    const int level = p.levels[l];
    Split s;
    s.gg = static_cast<double>(level) / n_g_steps;
    s.cg = level == n_g_steps ? 0 : t.r_cg[level];
    s.cc = std::max(0.0, 1.0 - s.gg - s.cg);
    p.splits.push_back(s);
    p.host_bytes += (1.0 - s.gg) * decode_work[l].sliceable_bytes;
    decode_steps[l] = {decode_work[l],
                       DecodeStreamTimes(t.decode, decode_work[l].shape, s)};
    if (level < n_g_steps) {
      p.all_gg = false;
      ++regimes[ClassifyRegime(decode_steps[l].mlp)];
    }
  }
  if (hw.cpu.memory_bytes > 0 &&
      p.host_bytes > static_cast<double>(hw.cpu.memory_bytes)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "ScheInfer: the host-resident MLP/expert weights (%.1f GB) exceed host "
        "memory (%.1f GB)",
        p.host_bytes / kGB, static_cast<double>(hw.cpu.memory_bytes) / kGB));
  }
  int most = -1;
  for (const auto& [regime, count] : regimes) {
    if (count > most) {
      most = count;
      p.regime = regime;
    }
  }

  // --- The decode step, all layers ---
  solved.head = HeadWork(m, hw, batch, batch);
  solved.tail = TailWork(m, hw, batch, batch);
  TANDEM_ASSIGN_OR_RETURN(p.decode_step_s,
                          StepSeconds(decode_steps, solved.head, solved.tail,
                                      hw.gpu.launch_overhead_s));
  solved.decode_steps = std::move(decode_steps);
  if (full) TANDEM_RETURN_IF_ERROR(BuildDecodeGraph(hw, &solved));

  // --- Prefill: decode split kept, n_g chosen for a prompt of prompt_len ---
  p.prompt_tokens = w.prompt_len;
  std::map<std::pair<int, int>, PrefillGroup> groups;  // (class, level)
  for (int64_t l = 0; l < layers; ++l) {
    auto [it, inserted] = groups.try_emplace({cls(l), p.levels[l]});
    if (inserted) {
      it->second = PrefillGroup{tables[cls(l)].prefill, prefill_work[l].shape,
                                p.splits[l], 0};
    }
    it->second.count += 1;
  }
  std::vector<PrefillGroup> group_list;
  for (auto& [key, g] : groups) group_list.push_back(g);
  TANDEM_ASSIGN_OR_RETURN(TokenAssignment ta,
                          SolvePrefillTokens(group_list, w.prompt_len));
  p.prefill_gpu_tokens = ta.gpu_tokens;
  p.prefill_mlp_s = ta.mlp_seconds;
  p.prefill_mlp_cpu_only_s = ta.cpu_only_seconds;
  // The whole prompt's prefill at a fraction phi of its tokens on the GPU.
  auto prefill_seconds = [&](double phi) -> absl::StatusOr<double> {
    std::vector<LayerStep> steps(layers);
    for (int64_t l = 0; l < layers; ++l) {
      steps[l] = {prefill_work[l],
                  PrefillStreamTimes(tables[cls(l)].prefill,
                                     prefill_work[l].shape, p.splits[l], phi)};
    }
    return StepSeconds(steps, inv.prefill_head, inv.prefill_tail,
                       hw.gpu.launch_overhead_s);
  };
  TANDEM_ASSIGN_OR_RETURN(p.prefill_one_s,
                          prefill_seconds(static_cast<double>(ta.gpu_tokens) /
                                          static_cast<double>(w.prompt_len)));
  // Only PlanBatch's callers see the token-assignment-off prefill.
  if (full) {
    if (ta.gpu_tokens == 0) {
      p.prefill_one_cpu_only_s = p.prefill_one_s;
    } else {
      TANDEM_ASSIGN_OR_RETURN(p.prefill_one_cpu_only_s, prefill_seconds(0));
    }
  }

  // --- Memory actually used and the throughput ---
  for (int64_t l = 0; l < layers; ++l) {
    const Split& s = p.splits[l];
    const double streamed = ta.gpu_tokens > 0 ? s.cg + s.cc : s.cg;
    p.staging_bytes =
        std::max(p.staging_bytes, streamed * decode_work[l].sliceable_bytes);
  }
  p.gpu_bytes = resident + kv + act + p.staging_bytes + p.gg_bytes;
  const double gen = static_cast<double>(w.gen_len);
  p.throughput = b * gen / (b * p.prefill_one_s + gen * p.decode_step_s);
  return solved;
}

}  // namespace

absl::StatusOr<BatchPlan> PlanBatch(const PlanInput& in, int64_t batch,
                                    const PlanOptions& options) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  if (batch < 1)
    return absl::InvalidArgumentError("ScheInfer: batch must be at least 1");
  TANDEM_ASSIGN_OR_RETURN(SolvedBatch s, SolveBatch(in, Invariant(in), batch,
                                                    options, /*full=*/true));
  return std::move(s.plan);
}

absl::StatusOr<FamilyPlan> PlanScheInfer(const PlanInput& in,
                                         const PlanOptions& options) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  const Workload& w = *in.workload;
  const int64_t cap =
      w.max_batch > 0 ? w.max_batch : std::max<int64_t>(options.max_batch, 1);
  const bool slo = w.objective == Objective::kThroughputUnderItlSlo;
  // The batch-independent work (prefill layers and model, head and tail,
  // memory totals) once for every batch; each batch's decode step is timed
  // on a StreamClock, and only the chosen batch's graph is built.
  const BatchInvariant inv = Invariant(in);
  std::vector<SolvedBatch> solved;
  for (int64_t batch = 1; batch <= cap; batch *= 2) {
    absl::StatusOr<SolvedBatch> s =
        SolveBatch(in, inv, batch, options, /*full=*/false);
    if (!s.ok()) {
      // A larger batch needs more KV and activations: none will fit either.
      if (batch == 1 ||
          s.status().code() != absl::StatusCode::kFailedPrecondition) {
        return s.status();
      }
      break;
    }
    solved.push_back(*std::move(s));
  }
  auto plan = [&](size_t i) -> const BatchPlan& { return solved[i].plan; };
  // Choose: best throughput; for the SLO the largest batch meeting it, else
  // the lowest ITL.
  size_t best = 0;
  bool meets = !slo || plan(0).decode_step_s <= w.slo_itl_s;
  for (size_t i = 1; i < solved.size(); ++i) {
    if (slo) {
      if (plan(i).decode_step_s <= w.slo_itl_s) {
        // Ascending batch: the last one meeting the SLO is the largest.
        best = i;
        meets = true;
      } else if (!meets && plan(i).decode_step_s < plan(best).decode_step_s) {
        best = i;
      }
    } else if (plan(i).throughput > plan(best).throughput) {
      best = i;
    }
  }
  TANDEM_RETURN_IF_ERROR(BuildDecodeGraph(*in.hardware, &solved[best]));
  BatchPlan& p = solved[best].plan;
  const ModelCost& m = *in.model;
  const ModelConfig& c = m.config();

  FamilyPlan out;
  proto::Policy& pol = out.policy;
  pol.set_family(proto::SCHEINFER);
  pol.set_batch_size(p.batch);
  pol.set_micro_batch_size(p.batch);
  pol.set_num_micro_batches(1);
  pol.set_attention_on_gpu(true);
  double cc_bytes = 0, cg_bytes = 0, sliceable = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Split& s = p.splits[l];
    proto::LayerPolicy* lp = pol.add_layers();
    lp->set_layer(static_cast<int32_t>(l));
    lp->set_attention_device(proto::GPU);
    lp->set_attention_weights_on_gpu(true);
    lp->set_gg_fraction(s.gg);
    lp->set_cg_fraction(s.cg);
    lp->set_cc_fraction(s.cc);
    const double n_m = SliceableBytes(m, l);
    sliceable += n_m;
    cg_bytes += s.cg * n_m;
    cc_bytes += s.cc * n_m;
  }
  pol.set_ffn_on_gpu(cc_bytes == 0);
  pol.set_weights_gpu_fraction(
      (m.total_weight_bytes() - sliceable + p.gg_bytes) /
      m.total_weight_bytes());
  pol.set_kv_gpu_fraction(1.0);
  constexpr int64_t kBlock = 16;
  pol.set_kv_block_tokens(kBlock);
  pol.set_gpu_kv_blocks(
      p.batch * ((w.longest_prompt() + w.gen_len + kBlock - 1) / kBlock));
  pol.set_prefill_token_budget(w.longest_prompt());
  pol.set_prefill_gpu_tokens(p.prefill_gpu_tokens);

  proto::Prediction* pr = pol.mutable_prediction();
  pr->set_throughput_tokens_per_s(p.throughput);
  pr->set_decode_step_seconds(p.decode_step_s);
  pr->set_inter_token_latency_seconds(p.decode_step_s);
  pr->set_prefill_seconds(static_cast<double>(p.batch) * p.prefill_one_s);
  const Resource bottleneck = p.decode_sim.bottleneck();
  pr->set_bottleneck(std::string(ResourceName(bottleneck)));
  pr->set_gpu_memory_bytes(static_cast<int64_t>(p.gpu_bytes));
  pr->set_cpu_memory_bytes(static_cast<int64_t>(p.host_bytes));
  for (int r = 0; r < kNumResources; ++r) {
    if (p.decode_sim.busy_s[r] > 0) {
      (*pr->mutable_busy_seconds())[std::string(
          ResourceName(static_cast<Resource>(r)))] = p.decode_sim.busy_s[r];
    }
  }
  const double pct = 100.0 / std::max(sliceable, 1.0);
  const double speedup =
      p.prefill_mlp_s > 0 ? p.prefill_mlp_cpu_only_s / p.prefill_mlp_s : 1.0;
  pol.set_rationale(absl::StrFormat(
      "ScheInfer, batch %d%s: MLP/expert weights %.0f%% GG / %.0f%% CG / "
      "%.0f%% CC "
      "(%.1f of %.1f GB budget on the GPU); decode %s, %s busy %.0f%% of the "
      "%.1f ms step; "
      "prefill runs %d of %d prompt tokens on the GPU (MLP %.1fx faster than "
      "CPU-only)",
      p.batch,
      slo ? (meets ? ", the largest within the ITL SLO"
                   : ", misses the ITL SLO at every batch")
          : ", the best throughput",
      p.gg_bytes * pct, cg_bytes * pct, cc_bytes * pct, p.gg_bytes / kGB,
      p.gg_budget_bytes / kGB, p.all_gg ? "all GG" : RegimeName(p.regime),
      ResourceName(bottleneck),
      100.0 * p.decode_sim.busy(bottleneck) / std::max(p.decode_step_s, 1e-30),
      p.decode_step_s * 1e3, p.prefill_gpu_tokens, p.prompt_tokens, speedup));
  out.decode_step = std::move(p.decode_step);
  out.decode_sim = std::move(p.decode_sim);
  return out;
}

}  // namespace scheinfer

absl::StatusOr<FamilyPlan> PlanScheInfer(const PlanInput& in) {
  return scheinfer::PlanScheInfer(in, scheinfer::PlanOptions{});
}

}  // namespace tandem::planner
