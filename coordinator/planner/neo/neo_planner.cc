#include "coordinator/planner/neo/neo_planner.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/planner/cost/roofline.h"
#include "coordinator/planner/neo/neo_costs.h"

namespace tandem::planner {
namespace {

using neo::DecodeRequest;
using neo::IterationCosts;
using neo::IterationPlan;
using neo::KvLocation;
using neo::SubBatch;

constexpr int64_t kKvBlockTokens = 16;

absl::Status CheckInput(const PlanInput& in) {
  if (in.model == nullptr || in.hardware == nullptr || in.workload == nullptr) {
    return absl::InvalidArgumentError(
        "Neo: PlanInput needs a model, hardware and workload");
  }
  TANDEM_RETURN_IF_ERROR(in.workload->Validate());
  const HardwareProfile& hw = *in.hardware;
  TANDEM_RETURN_IF_ERROR(CheckGpuAndLink(hw, "Neo"));
  if (!(hw.CpuAttentionBandwidth() > 0)) {
    return absl::FailedPreconditionError(
        "Neo: needs the CPU's memory bandwidth for attention");
  }
  return absl::OkStatus();
}

// Neo's per-layer schedule as a graph (neo.md §1.3): GPU order po0[i],
// pr0[i+1], po1[i], pr1[i+1], ga0[i+1]; the CPU attends ca0[i] after pr0[i]
// (via a D2H of Q/K/V) and ca1[i] after pr1[i], each result back by H2D
// before its sub-batch's post-projection.
StepGraph BuildGraph(const NeoCosts& k, const ModelCost& m,
                     const HardwareProfile& hw, const SubBatch& b0,
                     const SubBatch& b1, int layers) {
  const ModelConfig& c = m.config();
  const double ab = m.options().activation_bytes_per_element;
  const double qkv_bytes = static_cast<double>(c.q_dim() + 2 * c.kv_dim()) * ab;
  const double o_bytes = static_cast<double>(c.q_dim()) * ab;
  auto d2h = [&](int64_t r) {
    return static_cast<double>(r) * qkv_bytes / hw.link.d2h_bandwidth +
           hw.link.d2h_latency_s;
  };
  auto h2d = [&](int64_t r) {
    return static_cast<double>(r) * o_bytes / hw.link.h2d_bandwidth +
           hw.link.h2d_latency_s;
  };
  const int64_t cpu0 = static_cast<int64_t>(b0.cpu_decode_ids.size());
  const int64_t cpu1 = static_cast<int64_t>(b1.cpu_decode_ids.size());
  const double pre0 = k.Pre(b0.tokens), post0 = k.Post(b0.tokens);
  const double pre1 = k.Pre(b1.tokens), post1 = k.Post(b1.tokens);

  StepGraph g;
  TaskId prev0 =
      g.Add("embedding", Resource::kGpu, k.Embedding(b0.tokens + b1.tokens));
  TaskId prev1 = prev0;
  struct Layer {
    TaskId pr0 = -1, o0 = -1, pr1 = -1, o1 = -1, ga0 = -1;
  };
  auto front0 = [&](int i, Layer& x) {
    x.pr0 =
        g.Add(absl::StrCat("L", i, " pre b0"), Resource::kGpu, pre0, {prev0});
    if (cpu0 > 0) {
      const TaskId q = g.Add(absl::StrCat("L", i, " qkv b0 to CPU"),
                             Resource::kD2h, d2h(cpu0), {x.pr0});
      const TaskId a = g.Add(absl::StrCat("L", i, " CPU attention b0"),
                             Resource::kCpu, b0.cpu_attention_s, {q});
      x.o0 = g.Add(absl::StrCat("L", i, " attention out b0"), Resource::kH2d,
                   h2d(cpu0), {a});
    }
  };
  auto front1 = [&](int i, Layer& x) {
    if (b1.tokens > 0) {
      x.pr1 =
          g.Add(absl::StrCat("L", i, " pre b1"), Resource::kGpu, pre1, {prev1});
      if (cpu1 > 0) {
        const TaskId q = g.Add(absl::StrCat("L", i, " qkv b1 to CPU"),
                               Resource::kD2h, d2h(cpu1), {x.pr1});
        const TaskId a = g.Add(absl::StrCat("L", i, " CPU attention b1"),
                               Resource::kCpu, b1.cpu_attention_s, {q});
        x.o1 = g.Add(absl::StrCat("L", i, " attention out b1"), Resource::kH2d,
                     h2d(cpu1), {a});
      }
    }
    x.ga0 = g.Add(absl::StrCat("L", i, " GPU attention b0"), Resource::kGpu,
                  b0.gpu_attention_s, {x.pr0});
  };

  Layer cur;
  front0(0, cur);
  front1(0, cur);
  for (int i = 0; i < layers; ++i) {
    Layer next;
    std::vector<TaskId> deps0 = {cur.ga0};
    if (cur.o0 >= 0) deps0.push_back(cur.o0);
    prev0 =
        g.Add(absl::StrCat("L", i, " post b0"), Resource::kGpu, post0, deps0);
    if (i + 1 < layers) front0(i + 1, next);
    if (b1.tokens > 0) {
      std::vector<TaskId> deps1 = {cur.pr1};
      if (cur.o1 >= 0) deps1.push_back(cur.o1);
      prev1 =
          g.Add(absl::StrCat("L", i, " post b1"), Resource::kGpu, post1, deps1);
    }
    if (i + 1 < layers) front1(i + 1, next);
    cur = next;
  }
  g.Add("final norm + LM head", Resource::kGpu, k.Head(b0.tokens + b1.tokens),
        {prev0, prev1});
  return g;
}

}  // namespace

absl::StatusOr<NeoCapacity> NeoCapacityFor(const PlanInput& in,
                                           const NeoOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1) ||
      o.max_tokens_in_batch < 1) {
    return absl::InvalidArgumentError(
        "Neo: GPU memory share or token budget out of range");
  }
  const ModelCost& m = *in.model;
  const ModelConfig& c = m.config();
  const HardwareProfile& hw = *in.hardware;
  const Workload& w = *in.workload;
  const double ab = m.options().activation_bytes_per_element;
  NeoCapacity cap;
  cap.weights_bytes = m.total_weight_bytes();
  const double widest = static_cast<double>(std::max(
      c.intermediate_size,
      c.moe_intermediate_size * std::max<int64_t>(1, c.num_experts_per_tok)));
  const double tokens = static_cast<double>(o.max_tokens_in_batch);
  // A few hidden-size vectors, QKV and the widest MLP intermediate per row,
  // and fp32 logits for every row.
  cap.activation_bytes =
      tokens *
          (4.0 * static_cast<double>(c.hidden_size) + 2.0 * widest +
           static_cast<double>(c.q_dim() + 2 * c.kv_dim())) *
          ab +
      tokens * static_cast<double>(c.vocab_size) * 4.0;
  const double usable =
      o.gpu_memory_utilization * static_cast<double>(hw.gpu.memory_bytes);
  cap.gpu_kv_bytes = usable - cap.weights_bytes - cap.activation_bytes;
  if (cap.gpu_kv_bytes < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("Neo: keeps every weight on the GPU, and weights %.1f "
                        "GB + activations %.1f GB exceed "
                        "%.0f%% of the GPU's %.1f GB",
                        cap.weights_bytes / 1e9, cap.activation_bytes / 1e9,
                        100 * o.gpu_memory_utilization,
                        static_cast<double>(hw.gpu.memory_bytes) / 1e9));
  }
  cap.cpu_kv_bytes = std::max(
      0.0, static_cast<double>(hw.cpu.memory_bytes) - o.host_reserve_bytes);
  cap.kv_bytes_per_sequence = m.kv_bytes_per_token() * w.mean_decode_context();
  cap.max_gpu_sequences = static_cast<int64_t>(
      std::floor(cap.gpu_kv_bytes / cap.kv_bytes_per_sequence));
  cap.max_cpu_sequences = static_cast<int64_t>(
      std::floor(cap.cpu_kv_bytes / cap.kv_bytes_per_sequence));
  return cap;
}

absl::StatusOr<NeoEvaluation> EvaluateNeo(const PlanInput& in,
                                          int64_t gpu_sequences,
                                          int64_t cpu_sequences) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  if (gpu_sequences < 0 || cpu_sequences < 0 ||
      gpu_sequences + cpu_sequences == 0) {
    return absl::InvalidArgumentError(
        "Neo: an operating point needs sequences");
  }
  const ModelCost& m = *in.model;
  const Workload& w = *in.workload;
  const int layers = static_cast<int>(m.config().num_layers);
  const NeoCosts k(m, *in.hardware);
  const int64_t context =
      std::max<int64_t>(1, std::llround(w.mean_decode_context()));
  std::vector<DecodeRequest> decodes;
  for (int64_t i = 0; i < gpu_sequences; ++i) {
    decodes.push_back({i, context, KvLocation::kGpu});
  }
  for (int64_t i = 0; i < cpu_sequences; ++i) {
    decodes.push_back({gpu_sequences + i, context, KvLocation::kCpu});
  }
  NeoEvaluation e;
  TANDEM_ASSIGN_OR_RETURN(
      e.iteration, neo::PlanIteration({}, decodes, k.Functions(), layers));
  const IterationPlan& it = e.iteration;
  e.running = it.requests_run();
  e.cpu_running = static_cast<int64_t>(it.cpu_attention_ids.size());
  if (e.running == 0) {
    return absl::FailedPreconditionError("Neo: no sequence can run");
  }
  e.graph =
      it.pipelined
          ? BuildGraph(k, m, *in.hardware, it.batch0, it.batch1, layers)
          : BuildGraph(k, m, *in.hardware, it.gpu_only, SubBatch{}, layers);
  TANDEM_ASSIGN_OR_RETURN(e.sim, Simulate(e.graph));
  e.prefill_one_s = k.PrefillOne(w.prompt_len);
  e.prefill_share_s = static_cast<double>(e.running) * e.prefill_one_s /
                      static_cast<double>(w.gen_len);
  e.itl_s = e.sim.makespan_s + e.prefill_share_s;
  e.throughput = static_cast<double>(e.running) / e.itl_s;
  return e;
}

absl::StatusOr<FamilyPlan> PlanNeo(const PlanInput& in, const NeoOptions& o) {
  TANDEM_ASSIGN_OR_RETURN(const NeoCapacity cap, NeoCapacityFor(in, o));
  const Workload& w = *in.workload;
  const ModelCost& m = *in.model;
  int64_t limit = o.max_tokens_in_batch;
  if (w.max_batch > 0) limit = std::min(limit, w.max_batch);
  const int64_t g_max = std::min(cap.max_gpu_sequences, limit);
  auto cpu_offer = [&](int64_t g) {
    return std::max<int64_t>(0, std::min(cap.max_cpu_sequences, limit - g));
  };
  if (g_max == 0 && cpu_offer(0) == 0) {
    return absl::FailedPreconditionError(
        "Neo: neither KV pool holds one sequence");
  }

  // A GPU pool of zero sequences is tried only when the GPU holds none: Neo
  // hides CPU attention under GPU work and never plans CPU-only iterations
  // (PlanIteration's starvation guard is for liveness, not a policy).
  std::set<int64_t> gpu_points = {g_max};
  if (g_max <= o.grid_points) {
    for (int64_t g = 1; g <= g_max; ++g) gpu_points.insert(g);
  } else {
    for (int i = 0; i < o.grid_points; ++i) {
      gpu_points.insert(static_cast<int64_t>(std::llround(
          std::pow(static_cast<double>(g_max),
                   static_cast<double>(i) / (o.grid_points - 1)))));
    }
  }

  std::optional<NeoEvaluation> best;
  std::optional<NeoEvaluation>
      gpu_only;  // the GPU pool alone, for the rationale
  std::optional<NeoEvaluation>
      fastest;  // the lowest ITL seen, for the SLO message
  for (int64_t g : gpu_points) {
    // With the CPU pool offered (PlanIteration still takes the GPU-only
    // batch when that is better), and without it: under an SLO the GPU-only
    // batch may meet it where the pipelined one does not.
    std::vector<int64_t> offers = {cpu_offer(g)};
    if (g > 0 && cpu_offer(g) > 0) offers.push_back(0);
    for (const int64_t c : offers) {
      if (g + c == 0) continue;
      TANDEM_ASSIGN_OR_RETURN(NeoEvaluation e, EvaluateNeo(in, g, c));
      if (g == g_max && c == 0) gpu_only = e;
      if (!fastest.has_value() || e.itl_s < fastest->itl_s) fastest = e;
      if (w.objective == Objective::kThroughputUnderItlSlo &&
          e.itl_s > w.slo_itl_s)
        continue;
      if (!best.has_value() || e.throughput > best->throughput) {
        best = std::move(e);
      }
    }
  }
  if (!gpu_only.has_value() && g_max > 0) {
    TANDEM_ASSIGN_OR_RETURN(gpu_only, EvaluateNeo(in, g_max, 0));
  }
  if (!best.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("Neo: the shortest ITL, %.3f s with %d sequences, "
                        "exceeds the SLO %.3f s",
                        fastest->itl_s, fastest->running, w.slo_itl_s));
  }

  const NeoEvaluation& b = *best;
  const IterationPlan& it = b.iteration;
  FamilyPlan plan;
  plan.decode_step = b.graph;
  plan.decode_sim = b.sim;
  proto::Policy& p = plan.policy;
  p.set_family(proto::NEO);
  p.set_batch_size(b.running);
  p.set_micro_batch_size(it.pipelined ? it.batch0.requests() : b.running);
  p.set_num_micro_batches(it.pipelined ? 2 : 1);
  p.set_attention_on_gpu(
      true);  // per request: CPU for those in cpu_attention_sequences
  p.set_ffn_on_gpu(true);
  p.set_weights_gpu_fraction(1.0);
  const double kv_total = static_cast<double>(b.running);
  p.set_kv_gpu_fraction(
      kv_total > 0 ? static_cast<double>(b.running - b.cpu_running) / kv_total
                   : 1.0);
  p.set_cpu_attention_sequences(b.cpu_running);
  p.set_kv_block_tokens(kKvBlockTokens);
  const double block_bytes =
      static_cast<double>(kKvBlockTokens) * m.kv_bytes_per_token();
  p.set_gpu_kv_blocks(static_cast<int64_t>(cap.gpu_kv_bytes / block_bytes));
  p.set_cpu_kv_blocks(static_cast<int64_t>(cap.cpu_kv_bytes / block_bytes));
  p.set_prefill_token_budget(o.max_tokens_in_batch);
  p.set_prefill_gpu_tokens(o.max_tokens_in_batch);
  for (int64_t l = 0; l < m.config().num_layers; ++l) {
    proto::LayerPolicy* lp = p.add_layers();
    lp->set_layer(static_cast<int32_t>(l));
    lp->set_attention_device(
        proto::GPU);  // per request; see cpu_attention_sequences
    lp->set_attention_weights_on_gpu(true);
    lp->set_gg_fraction(1.0);
  }
  proto::Prediction* pred = p.mutable_prediction();
  pred->set_decode_step_seconds(b.sim.makespan_s);
  pred->set_inter_token_latency_seconds(b.itl_s);
  pred->set_prefill_seconds(static_cast<double>(b.running) * b.prefill_one_s);
  pred->set_throughput_tokens_per_s(b.throughput);
  pred->set_bottleneck(std::string(ResourceName(b.sim.bottleneck())));
  pred->set_gpu_memory_bytes(static_cast<int64_t>(
      std::llround(cap.weights_bytes + cap.activation_bytes +
                   static_cast<double>(b.running - b.cpu_running) *
                       cap.kv_bytes_per_sequence)));
  pred->set_cpu_memory_bytes(static_cast<int64_t>(std::llround(
      static_cast<double>(b.cpu_running) * cap.kv_bytes_per_sequence)));
  for (int r = 0; r < kNumResources; ++r) {
    if (b.sim.busy_s[r] > 0) {
      (*pred->mutable_busy_seconds())[std::string(
          ResourceName(static_cast<Resource>(r)))] = b.sim.busy_s[r];
    }
  }
  const std::string versus =
      gpu_only.has_value()
          ? absl::StrFormat(
                "GPU-only (%d sequences, the GPU KV pool) %.1f tok/s",
                gpu_only->running, gpu_only->throughput)
          : std::string(
                "GPU-only impossible (the GPU KV pool holds no sequence)");
  p.set_rationale(
      absl::StrFormat("Neo: %d sequences (%d with CPU attention, %s) at %.1f "
                      "tok/s, ITL %.3f s; %s",
                      b.running, b.cpu_running,
                      it.pipelined ? "two asymmetric sub-batches" : "GPU only",
                      b.throughput, b.itl_s, versus));
  return plan;
}

absl::StatusOr<FamilyPlan> PlanNeo(const PlanInput& in) {
  return PlanNeo(in, NeoOptions{});
}

}  // namespace tandem::planner
