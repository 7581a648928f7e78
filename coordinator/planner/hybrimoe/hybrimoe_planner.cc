#include "coordinator/planner/hybrimoe/hybrimoe_planner.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/planner/cost/roofline.h"

namespace tandem::planner {
namespace {

using experts::ExpertCosts;
using experts::ExpertSplit;
using experts::ExpertWork;

constexpr int kExpertKernels = 3;  // gate/up GEMM, activation, down GEMM
constexpr int64_t kKvBlockTokens = 16;
// On-demand experts computed on the GPU stage through two buffers: one
// computes while the next arrives.
constexpr int kStagingBuffers = 2;

// GPU kernels at their roofline, never below the launch cost.
double GpuSeconds(double flops, double bytes, const HardwareProfile& hw,
                  int kernels = 1) {
  return GpuKernelSeconds(flops, bytes, hw, kernels);
}
double CpuFlops(const HardwareProfile& hw) {
  return hw.cpu.bf16_flops > 0 ? hw.cpu.bf16_flops : hw.cpu.f32_flops;
}
double CpuSeconds(double flops, double bytes, const HardwareProfile& hw,
                  int calls = 1) {
  return RooflineSeconds(flops, CpuFlops(hw), bytes, hw.cpu.memory_bandwidth) +
         calls * hw.cpu.op_overhead_s;
}

absl::Status CheckInput(const PlanInput& in) {
  if (in.model == nullptr || in.hardware == nullptr || in.workload == nullptr) {
    return absl::InvalidArgumentError(
        "HybriMoE: PlanInput needs a model, hardware and workload");
  }
  TANDEM_RETURN_IF_ERROR(in.workload->Validate());
  if (!in.model->config().is_moe()) {
    return absl::FailedPreconditionError(
        "HybriMoE: the model is dense; there are no experts to split");
  }
  const HardwareProfile& hw = *in.hardware;
  TANDEM_RETURN_IF_ERROR(CheckGpuAndLink(hw, "HybriMoE"));
  if (!(CpuFlops(hw) > 0) || !(hw.cpu.memory_bandwidth > 0)) {
    return absl::FailedPreconditionError(
        "HybriMoE: needs the CPU's FLOP/s and memory bandwidth");
  }
  return absl::OkStatus();
}

int64_t MoeLayers(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) n += c.IsMoeLayer(l) ? 1 : 0;
  return n;
}

ExpertCosts CostsOf(const ModelCost& m, const HardwareProfile& hw) {
  const double h = static_cast<double>(m.config().hidden_size);
  const double ab = m.options().activation_bytes_per_element;
  ExpertCosts c;
  c.gpu_compute_s = [&m, &hw, h, ab](int64_t tokens) {
    const double t = static_cast<double>(tokens);
    return GpuSeconds(t * m.expert_flops_per_token(),
                      m.expert_bytes() + 2 * t * h * ab, hw, kExpertKernels);
  };
  c.cpu_compute_s = [&m, &hw, h, ab](int64_t tokens) {
    const double t = static_cast<double>(tokens);
    return CpuSeconds(t * m.expert_flops_per_token(),
                      m.expert_bytes() + 2 * t * h * ab, hw, kExpertKernels);
  };
  c.transfer_s = H2dSeconds(m.expert_bytes(), hw);
  return c;
}

// A step of `tokens` tokens through every layer: the ops of `ops_of(layer)`
// but the routed experts on the GPU, then the layer's expected activated
// experts split by SplitExperts.
template <typename OpsOf>
absl::StatusOr<HybriMoeStep> SimulateStep(const PlanInput& in,
                                          const HybriMoeLayout& layout,
                                          int64_t tokens, int64_t logit_rows,
                                          OpsOf ops_of) {
  const ModelCost& m = *in.model;
  const HardwareProfile& hw = *in.hardware;
  const ModelConfig& c = m.config();
  const double h = static_cast<double>(c.hidden_size);
  const double ab = m.options().activation_bytes_per_element;
  const int64_t e = c.num_experts;

  HybriMoeStep step;
  const double active = m.ExpectedActiveExperts(static_cast<double>(tokens));
  step.active_experts =
      static_cast<int>(std::clamp<int64_t>(std::llround(active), 1, e));
  step.tokens_per_expert = std::max<int64_t>(
      1, std::llround(static_cast<double>(tokens * c.num_experts_per_tok) /
                      step.active_experts));
  // Uniform routing: any slot holds an active expert with probability A/E,
  // so the expected hits are A·(slots + prefetched)/E. Counts are rounded to
  // whole experts because the graph needs whole tasks: at most half an
  // expert per layer off (at batch 1 with one slot, 0.25 hits read as 0).
  const double hit =
      std::min(1.0, static_cast<double>(layout.cache_slots + layout.prefetch) /
                        static_cast<double>(e));
  step.cached_active = static_cast<int>(std::min<int64_t>(
      step.active_experts, std::llround(step.active_experts * hit)));
  std::vector<ExpertWork> work;
  for (int x = 0; x < step.active_experts; ++x) {
    work.push_back({x, step.tokens_per_expert, x < step.cached_active});
  }
  const ExpertCosts costs = CostsOf(m, hw);
  TANDEM_ASSIGN_OR_RETURN(step.layer_split,
                          experts::SplitExperts(work, costs));
  const ExpertSplit& split = step.layer_split;

  StepGraph& g = step.graph;
  const std::vector<OpCost> ends = m.HeadAndTail(tokens, logit_rows);
  TaskId prev = g.Add("embedding", Resource::kGpu,
                      GpuSeconds(ends[0].flops, ends[0].bytes(), hw));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string name = absl::StrCat("L", l, " ");
    double dense_s = 0;
    for (const OpCost& op : ops_of(l)) {
      if (op.kind != OpKind::kRoutedExperts) {
        dense_s += GpuSeconds(op.flops, op.bytes(), hw);
      }
    }
    const TaskId attention =
        g.Add(name + "attention + router", Resource::kGpu, dense_s, {prev});
    if (!c.IsMoeLayer(l)) {
      prev = attention;
      continue;
    }
    int64_t cpu_tokens = 0;
    for (const auto& a : split.cpu) cpu_tokens += a.tokens;
    TaskId inputs = -1;
    if (!split.cpu.empty()) {
      inputs = g.Add(name + "expert inputs to CPU", Resource::kD2h,
                     D2hSeconds(static_cast<double>(tokens) * h * ab, hw),
                     {attention});
    }
    std::vector<TaskId> loads;
    for (const auto& a : split.gpu) {
      loads.push_back(
          a.cached ? -1
                   : g.Add(absl::StrCat(name, "expert ", a.expert, " load"),
                           Resource::kH2d, costs.transfer_s, {attention}));
    }
    for (int p = 0; p < layout.prefetch; ++p) {
      g.Add(absl::StrCat(name, "prefetch for L", l + 1), Resource::kH2d,
            costs.transfer_s, {attention});
    }
    TaskId last_gpu = attention;
    for (size_t i = 0; i < split.gpu.size(); ++i) {
      std::vector<TaskId> deps = {attention};
      if (loads[i] >= 0) deps.push_back(loads[i]);
      last_gpu =
          g.Add(absl::StrCat(name, "expert ", split.gpu[i].expert, " gpu"),
                Resource::kGpu, costs.gpu_compute_s(split.gpu[i].tokens), deps);
    }
    std::vector<TaskId> combine_deps = {last_gpu};
    TaskId last_cpu = inputs;
    for (const auto& a : split.cpu) {
      last_cpu =
          g.Add(absl::StrCat(name, "expert ", a.expert, " cpu"), Resource::kCpu,
                costs.cpu_compute_s(a.tokens), {last_cpu});
    }
    if (!split.cpu.empty()) {
      combine_deps.push_back(
          g.Add(name + "expert outputs to GPU", Resource::kH2d,
                H2dSeconds(static_cast<double>(cpu_tokens) * h * ab, hw),
                {last_cpu}));
    }
    prev = g.Add(name + "combine", Resource::kGpu, hw.gpu.launch_overhead_s,
                 combine_deps);
  }
  g.Add("final norm + LM head", Resource::kGpu,
        GpuSeconds(ends[1].flops, ends[1].bytes(), hw) +
            GpuSeconds(ends[2].flops, ends[2].bytes(), hw),
        {prev});
  TANDEM_ASSIGN_OR_RETURN(step.sim, Simulate(g));
  return step;
}

struct Candidate {
  HybriMoeLayout layout;
  HybriMoeStep decode;
  double prefill_s = 0;
};

}  // namespace

absl::StatusOr<HybriMoeLayout> HybriMoeLayoutFor(const PlanInput& in,
                                                 const HybriMoeOptions& o,
                                                 int64_t batch, int prefetch) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  if (batch < 1 || prefetch < 0 || o.prefill_chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        "HybriMoE: batch, prefetch and chunk size out of range");
  }
  const ModelCost& m = *in.model;
  const ModelConfig& c = m.config();
  const Workload& w = *in.workload;
  const HardwareProfile& hw = *in.hardware;
  const double ab = m.options().activation_bytes_per_element;
  const double moe_layers = static_cast<double>(MoeLayers(c));
  const double all_experts =
      moe_layers * static_cast<double>(c.num_experts) * m.expert_bytes();

  HybriMoeLayout l;
  l.batch = batch;
  l.prefetch = prefetch;
  l.gpu_weights = m.total_weight_bytes() - all_experts;
  l.gpu_kv = static_cast<double>(batch) * m.kv_bytes_per_token() *
             static_cast<double>(w.longest_prompt() + w.gen_len);
  // A prefill chunk's working set: a few hidden-size vectors and one
  // expert's intermediate per token, plus the batch's fp32 logits.
  const double act_tokens = static_cast<double>(
      std::max<int64_t>(o.prefill_chunk_tokens, w.longest_prompt()));
  l.gpu_activations =
      act_tokens *
          (4.0 * static_cast<double>(c.hidden_size) +
           2.0 * static_cast<double>(c.moe_intermediate_size) +
           static_cast<double>(c.q_dim() + 2 * c.kv_dim())) *
          ab +
      static_cast<double>(batch) * static_cast<double>(c.vocab_size) * 4.0;
  l.gpu_expert_buffers = (kStagingBuffers + prefetch) * m.expert_bytes();
  l.gpu_reserve = o.gpu_reserve_bytes;
  const double free = static_cast<double>(hw.gpu.memory_bytes) - l.gpu_total();
  if (free < 0) {
    l.why_not = absl::StrFormat(
        "HybriMoE batch %d: non-expert weights %.2f GB + KV %.2f GB + "
        "activations %.2f GB + "
        "buffers %.2f GB + reserve %.2f GB exceed the GPU's %.2f GB",
        batch, l.gpu_weights / 1e9, l.gpu_kv / 1e9, l.gpu_activations / 1e9,
        l.gpu_expert_buffers / 1e9, l.gpu_reserve / 1e9,
        static_cast<double>(hw.gpu.memory_bytes) / 1e9);
    return l;
  }
  l.cache_slots = static_cast<int>(
      std::min<double>(static_cast<double>(c.num_experts),
                       std::floor(free / (m.expert_bytes() * moe_layers))));
  l.gpu_cache = l.cache_slots * m.expert_bytes() * moe_layers;
  l.host_bytes = all_experts + o.host_reserve_bytes;
  if (l.host_bytes > static_cast<double>(hw.cpu.memory_bytes)) {
    l.why_not = absl::StrFormat(
        "HybriMoE: the experts (%.1f GB) do not fit host memory (%.1f GB)",
        all_experts / 1e9, static_cast<double>(hw.cpu.memory_bytes) / 1e9);
    return l;
  }
  l.fits = true;
  return l;
}

absl::StatusOr<HybriMoeStep> SimulateHybriMoeDecode(
    const PlanInput& in, const HybriMoeLayout& layout) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  const ModelCost& m = *in.model;
  const double context = in.workload->mean_decode_context();
  return SimulateStep(in, layout, layout.batch, layout.batch, [&](int64_t l) {
    return m.DecodeLayer(l, layout.batch, context);
  });
}

absl::StatusOr<HybriMoeStep> SimulateHybriMoePrefillChunk(
    const PlanInput& in, const HybriMoeLayout& layout, int64_t sequences) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  if (sequences < 1) {
    return absl::InvalidArgumentError("HybriMoE: a chunk needs a sequence");
  }
  const ModelCost& m = *in.model;
  const int64_t prompt = in.workload->prompt_len;
  return SimulateStep(
      in, layout, sequences * prompt, sequences,
      [&](int64_t l) { return m.PrefillLayer(l, sequences, prompt); });
}

absl::StatusOr<FamilyPlan> PlanHybriMoe(const PlanInput& in,
                                        const HybriMoeOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  const Workload& w = *in.workload;
  const ModelCost& m = *in.model;
  const ModelConfig& c = m.config();
  std::vector<int64_t> batches;
  if (o.batch_size > 0) {
    batches.push_back(o.batch_size);
  } else {
    const int64_t cap =
        w.max_batch > 0 ? std::min(w.max_batch, o.max_batch) : o.max_batch;
    for (int64_t b = 1; b <= cap; b *= 2) batches.push_back(b);
    if (w.max_batch > 0 && w.max_batch <= o.max_batch &&
        batches.back() != w.max_batch) {
      batches.push_back(w.max_batch);
    }
  }

  std::optional<Candidate> best;
  auto throughput = [&](const Candidate& x) {
    const double gen = static_cast<double>(w.gen_len);
    return static_cast<double>(x.layout.batch) * gen /
           (x.prefill_s + gen * x.decode.sim.makespan_s);
  };
  std::string why_not = "HybriMoE: no batch size to try";
  std::string slo_miss;  // preferred: something fitted but was too slow
  for (int64_t batch : batches) {
    for (int prefetch = 0; prefetch <= o.max_prefetch; ++prefetch) {
      TANDEM_ASSIGN_OR_RETURN(HybriMoeLayout layout,
                              HybriMoeLayoutFor(in, o, batch, prefetch));
      if (!layout.fits) {
        why_not = layout.why_not;
        continue;
      }
      Candidate cand;
      cand.layout = layout;
      TANDEM_ASSIGN_OR_RETURN(cand.decode, SimulateHybriMoeDecode(in, layout));
      if (w.objective == Objective::kThroughputUnderItlSlo &&
          cand.decode.sim.makespan_s > w.slo_itl_s) {
        if (slo_miss.empty()) {
          slo_miss = absl::StrFormat(
              "HybriMoE batch %d: decode step %.3f s exceeds the ITL SLO %.3f "
              "s",
              batch, cand.decode.sim.makespan_s, w.slo_itl_s);
        }
        continue;
      }
      const int64_t per_chunk =
          std::max<int64_t>(1, o.prefill_chunk_tokens / w.prompt_len);
      const int64_t full = batch / per_chunk, rest = batch % per_chunk;
      if (full > 0) {
        TANDEM_ASSIGN_OR_RETURN(HybriMoeStep chunk,
                                SimulateHybriMoePrefillChunk(
                                    in, layout, std::min(per_chunk, batch)));
        cand.prefill_s += static_cast<double>(full) * chunk.sim.makespan_s;
      }
      if (rest > 0) {
        TANDEM_ASSIGN_OR_RETURN(HybriMoeStep chunk,
                                SimulateHybriMoePrefillChunk(in, layout, rest));
        cand.prefill_s += chunk.sim.makespan_s;
      }
      if (!best.has_value() || throughput(cand) > throughput(*best)) {
        best = std::move(cand);
      }
    }
  }
  if (!best.has_value()) {
    return absl::FailedPreconditionError(slo_miss.empty() ? why_not : slo_miss);
  }

  const Candidate& b = *best;
  const HybriMoeLayout& l = b.layout;
  FamilyPlan plan;
  plan.decode_step = b.decode.graph;
  plan.decode_sim = b.decode.sim;
  proto::Policy& p = plan.policy;
  p.set_family(proto::HYBRIMOE);
  p.set_batch_size(l.batch);
  p.set_micro_batch_size(l.batch);
  p.set_num_micro_batches(1);
  p.set_attention_on_gpu(true);
  p.set_cache_score_alpha(o.alpha);
  p.set_prefetch_depth(l.prefetch > 0 ? 1 : 0);
  p.set_weights_gpu_fraction((l.gpu_weights + l.gpu_cache) /
                             m.total_weight_bytes());
  p.set_kv_gpu_fraction(1.0);
  p.set_kv_block_tokens(kKvBlockTokens);
  p.set_gpu_kv_blocks(
      l.batch *
      ((w.longest_prompt() + w.gen_len + kKvBlockTokens - 1) / kKvBlockTokens));
  p.set_prefill_token_budget(
      std::max<int64_t>(o.prefill_chunk_tokens, w.longest_prompt()));
  p.set_prefill_gpu_tokens(p.prefill_token_budget());
  // The static part of the dynamic split, for display: the cached share is
  // GG; the rest divides as the expected decode split sends the non-cached
  // experts (streamed to the GPU = CG, computed on the CPU = CC).
  const double e = static_cast<double>(c.num_experts);
  const double gg = l.cache_slots / e;
  int gpu_streamed = 0;
  for (const auto& a : b.decode.layer_split.gpu) {
    gpu_streamed += a.cached ? 0 : 1;
  }
  const int cpu_side = static_cast<int>(b.decode.layer_split.cpu.size());
  const double cg_share =
      gpu_streamed + cpu_side > 0
          ? static_cast<double>(gpu_streamed) / (gpu_streamed + cpu_side)
          : 0;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    proto::LayerPolicy* lp = p.add_layers();
    lp->set_layer(static_cast<int32_t>(layer));
    lp->set_attention_device(proto::GPU);
    lp->set_attention_weights_on_gpu(true);
    if (c.IsMoeLayer(layer)) {
      lp->set_expert_cache_slots(l.cache_slots);
      lp->set_gg_fraction(gg);
      lp->set_cg_fraction((1 - gg) * cg_share);
      lp->set_cc_fraction((1 - gg) * (1 - cg_share));
    } else {
      lp->set_gg_fraction(1.0);
    }
  }
  proto::Prediction* pred = p.mutable_prediction();
  const double step = b.decode.sim.makespan_s;
  pred->set_decode_step_seconds(step);
  pred->set_inter_token_latency_seconds(step);
  pred->set_prefill_seconds(b.prefill_s);
  pred->set_throughput_tokens_per_s(throughput(b));
  pred->set_bottleneck(std::string(ResourceName(b.decode.sim.bottleneck())));
  pred->set_gpu_memory_bytes(static_cast<int64_t>(std::llround(l.gpu_total())));
  pred->set_cpu_memory_bytes(static_cast<int64_t>(std::llround(l.host_bytes)));
  for (int r = 0; r < kNumResources; ++r) {
    if (b.decode.sim.busy_s[r] > 0) {
      (*pred->mutable_busy_seconds())[std::string(
          ResourceName(static_cast<Resource>(r)))] = b.decode.sim.busy_s[r];
    }
  }
  p.set_rationale(absl::StrFormat(
      "HybriMoE batch %d: %d of %d experts cached per layer%s; a decode layer "
      "activates %d "
      "(%d cached), the split sends %d to the GPU and %d to the CPU; bound by "
      "%s",
      l.batch, l.cache_slots, c.num_experts,
      l.prefetch > 0 ? " + 1 prefetched" : "", b.decode.active_experts,
      b.decode.cached_active, static_cast<int>(b.decode.layer_split.gpu.size()),
      cpu_side, ResourceName(b.decode.sim.bottleneck())));
  return plan;
}

absl::StatusOr<FamilyPlan> PlanHybriMoe(const PlanInput& in) {
  return PlanHybriMoe(in, HybriMoeOptions{});
}

}  // namespace tandem::planner
