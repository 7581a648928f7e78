#include "coordinator/planner/moe_lightning/moe_lightning_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/planner/moe_lightning/cgopipe_graph.h"
#include "coordinator/planner/moe_lightning/hrm.h"
#include "coordinator/planner/moe_lightning/ml_policy_search.h"

namespace tandem::planner {
namespace {

constexpr int64_t kKvBlockTokens = 16;  // the scheduler's block size

// The HRM reading of the chosen point, for the rationale: which roof binds
// the FFN (GPU memory, PCIe link or compute) and whether attention sits
// below P1 (so belongs on the CPU).
std::string RoofSummary(const ml::PerformanceModel& m, const ml::PolicyPoint& p,
                        int64_t layer) {
  const HardwareProfile& hw = m.hardware();
  const double gpus = hw.gpu.count;
  ml::HierarchicalRoofline h;
  h.compute = {hw.gpu.bf16_flops * gpus, hw.gpu.memory_bandwidth * gpus};
  h.link_bandwidth = hw.link.h2d_bandwidth * gpus;
  double ffn_flops = 0, ffn_bytes = 0, attn_flops = 0, attn_bytes = 0;
  for (const OpCost& op :
       m.model().DecodeLayer(layer, p.micro_batch_size, m.decode_context())) {
    if (op.kind == OpKind::kRoutedExperts || op.kind == OpKind::kDenseMlp ||
        op.kind == OpKind::kSharedExpert) {
      ffn_flops += op.flops;
      ffn_bytes += op.bytes();
    }
    if (op.kind == OpKind::kAttentionCore) {
      attn_flops = op.flops;
      attn_bytes = op.bytes();
    }
  }
  double attn_res = 0, ffn_res = 0;
  m.SplitResident(layer, p.weights_gpu_fraction, &attn_res, &ffn_res);
  const double streamed = m.model().ffn_weight_bytes(layer) - ffn_res;
  // I^i per micro-batch against HBM; I^j: all N tokens' FFN FLOPs of the
  // layer against the FFN bytes that cross PCIe for it.
  const double i_gpu = ffn_bytes > 0 ? ffn_flops / ffn_bytes : 0;
  const double n_ub = static_cast<double>(p.num_micro_batches());
  const double i_host = streamed > 0 ? n_ub * ffn_flops / streamed : 0;
  std::string ffn;
  if (p.ffn_on_gpu) {
    const ml::Roof roof = ml::BindingRoof(h, i_gpu, i_host);
    const double memory = h.compute.bandwidth * i_gpu,
                 link = h.link_bandwidth * i_host;
    // Within 5% the two roofs meet: the paper's balance point (Eq. 11).
    const bool balanced =
        i_host > 0 && roof != ml::Roof::kCompute &&
        std::abs(memory - link) <= 0.05 * std::max(memory, link);
    ffn = absl::StrFormat(
        "FFN %s (I_hbm %.3g, I_host %s FLOP/B, P2 %.3g)",
        balanced ? "at the balance of the link and HBM roofs"
                 : absl::StrCat("under the GPU ",
                                std::string(ml::RoofName(roof)), " roof"),
        i_gpu, i_host > 0 ? absl::StrFormat("%.3g", i_host) : "inf",
        ml::TurningPointP2(h, i_gpu));
  } else {
    ffn = "FFN on the CPU (host share)";
  }
  ml::HierarchicalRoofline a = h;
  a.home = {hw.cpu.f32_flops > 0 ? hw.cpu.f32_flops : hw.cpu.bf16_flops,
            hw.CpuAttentionBandwidth()};
  const double i_attn = attn_bytes > 0 ? attn_flops / attn_bytes : 0;
  return absl::StrFormat("%s; attention I %.3g FLOP/B vs P1 %.3g", ffn, i_attn,
                         ml::TurningPointP1(a, i_attn));
}

}  // namespace

absl::StatusOr<FamilyPlan> PlanMoeLightning(const PlanInput& in) {
  return PlanMoeLightning(in, MoeLightningOptions{});
}

absl::StatusOr<FamilyPlan> PlanMoeLightning(
    const PlanInput& in, const MoeLightningOptions& options) {
  if (in.model == nullptr || in.hardware == nullptr || in.workload == nullptr) {
    return absl::InvalidArgumentError(
        "MoE-Lightning: PlanInput lacks model, hardware or workload");
  }
  TANDEM_ASSIGN_OR_RETURN(
      ml::PerformanceModel model,
      ml::PerformanceModel::Create(in.model, in.hardware, in.workload,
                                   options.model));
  TANDEM_ASSIGN_OR_RETURN(ml::SearchOutcome best,
                          ml::SearchMoeLightningPolicy(model));
  const ml::PolicyPoint& p = best.point;
  const ml::Estimate& e = best.estimate;
  const ModelConfig& c = in.model->config();
  const Workload& w = *in.workload;

  FamilyPlan plan;
  proto::Policy& pol = plan.policy;
  pol.set_family(proto::MOE_LIGHTNING);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    double attn_res = 0, ffn_res = 0;
    model.SplitResident(l, p.weights_gpu_fraction, &attn_res, &ffn_res);
    const double ffn_bytes = in.model->ffn_weight_bytes(l);
    const double gg = ffn_bytes > 0 ? std::min(1.0, ffn_res / ffn_bytes) : 1.0;
    proto::LayerPolicy* lp = pol.add_layers();
    lp->set_layer(static_cast<int32_t>(l));
    lp->set_attention_device(p.attention_on_gpu ? proto::GPU : proto::CPU);
    lp->set_attention_weights_on_gpu(attn_res >= model.attention_part_bytes() *
                                                     (1 - 1e-12));
    lp->set_gg_fraction(gg);
    lp->set_cg_fraction(p.ffn_on_gpu ? 1 - gg : 0);
    lp->set_cc_fraction(p.ffn_on_gpu ? 0 : 1 - gg);
    lp->set_expert_cache_slots(0);  // streamed pages, not a cache
  }
  pol.set_batch_size(p.batch_size);
  pol.set_micro_batch_size(p.micro_batch_size);
  pol.set_num_micro_batches(static_cast<int32_t>(p.num_micro_batches()));
  pol.set_attention_on_gpu(p.attention_on_gpu);
  pol.set_ffn_on_gpu(p.ffn_on_gpu);
  pol.set_weights_gpu_fraction(p.weights_gpu_fraction);
  pol.set_kv_gpu_fraction(p.kv_gpu_fraction);

  const int64_t seq_tokens =
      static_cast<int64_t>(std::ceil(model.kv_prompt_len())) + w.gen_len;
  const int64_t blocks =
      p.batch_size * ((seq_tokens + kKvBlockTokens - 1) / kKvBlockTokens);
  const int64_t gpu_blocks =
      p.attention_on_gpu ? static_cast<int64_t>(std::floor(
                               p.kv_gpu_fraction * static_cast<double>(blocks)))
                         : 0;
  pol.set_kv_block_tokens(kKvBlockTokens);
  pol.set_gpu_kv_blocks(gpu_blocks);
  pol.set_cpu_kv_blocks(blocks - gpu_blocks);
  const int64_t prefill_tokens = static_cast<int64_t>(
      std::ceil(model.prefill_tokens_per_micro_batch(p.micro_batch_size)));
  pol.set_prefill_token_budget(prefill_tokens);
  pol.set_prefill_gpu_tokens(prefill_tokens);  // prefill runs wholly on the GPU

  // CGOPipe for a few layers of the costliest kind.
  const int64_t layer = model.CostliestLayer(p);
  const int sim_layers = static_cast<int>(
      std::clamp<int64_t>(options.simulated_layers, 1, c.num_layers));
  ml::CgoPipeGraph g = ml::BuildCgoPipeGraph(e.layer, p, sim_layers);
  TANDEM_ASSIGN_OR_RETURN(plan.decode_sim, Simulate(g.graph));
  const double sim_layer = ml::SteadyLayerSeconds(g, plan.decode_sim);

  proto::Prediction* pr = pol.mutable_prediction();
  pr->set_throughput_tokens_per_s(e.throughput);
  pr->set_decode_step_seconds(e.decode_step_s);
  // A static batch: every sequence advances one token per step.
  pr->set_inter_token_latency_seconds(e.decode_step_s);
  pr->set_prefill_seconds(e.prefill_s);
  pr->set_bottleneck(e.bottleneck);
  pr->set_gpu_memory_bytes(static_cast<int64_t>(std::ceil(e.memory.gpu())));
  pr->set_cpu_memory_bytes(static_cast<int64_t>(std::ceil(e.memory.cpu())));
  // Busy seconds of one whole step: the simulated layers' busy time per
  // layer, times the layers, plus the LM head on the GPU. (Models that mix
  // dense and MoE layers count every layer as the costliest kind here; the
  // step time above sums the kinds exactly.)
  for (Resource r : {Resource::kGpu, Resource::kH2d, Resource::kD2h,
                     Resource::kCpu, Resource::kLaunch}) {
    double busy = ml::LayerBusySeconds(g, plan.decode_sim, r) *
                  static_cast<double>(c.num_layers);
    if (r == Resource::kGpu) busy += model.DecodeHeadSeconds(p);
    (*pr->mutable_busy_seconds())[std::string(ResourceName(r))] = busy;
  }
  plan.decode_step = std::move(g.graph);

  const double decode_s = model.decode_steps() * e.decode_step_s;
  pol.set_rationale(absl::StrFormat(
      "MoE-Lightning%s: attention on %s, FFN on %s; N=%d (mu %d x %d), "
      "r_w=%.3f%s; decode "
      "bound by %s, %s; prefill %.0f%% of the time; CGOPipe sim %.2fx HRM per "
      "layer",
      options.model.padded ? "(p)" : "", p.attention_on_gpu ? "GPU" : "CPU",
      p.ffn_on_gpu ? "GPU" : "CPU", p.batch_size, p.micro_batch_size,
      p.num_micro_batches(), p.weights_gpu_fraction,
      p.attention_on_gpu ? absl::StrFormat(", r_c=%.3f", p.kv_gpu_fraction)
                         : "",
      e.bottleneck, RoofSummary(model, p, layer),
      100 * e.prefill_s / (e.prefill_s + decode_s),
      e.layer.seconds() > 0 ? sim_layer / e.layer.seconds() : 0.0));
  return plan;
}

}  // namespace tandem::planner
