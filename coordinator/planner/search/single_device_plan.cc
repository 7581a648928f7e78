#include "coordinator/planner/search/single_device_plan.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace tandem::planner {
namespace {

// The figures of the one device that runs everything.
struct Device {
  proto::ScheduleFamily family;
  Resource resource;           // where its work shows in the simulated step
  double memory_bytes = 0;
  double bandwidth = 0;        // weights and activations
  double attention_bandwidth = 0;  // KV reads of decode attention
  double flops = 0;
  double op_overhead_s = 0;    // kernel launch / operator call
  const char* name = "";
};

// Activations and scratch of a step of `tokens` tokens in f32: a deliberate
// overestimate (four copies) of what the engine keeps live.
double ActivationBytes(const ModelCost& m, double tokens, double logit_rows) {
  return m.StepActivationBytes(tokens, logit_rows, 4, 4);
}

double OpSeconds(const OpCost& op, const Device& d) {
  const double kv = op.kv_read_bytes + op.kv_write_bytes;
  const double memory = (op.weight_bytes + op.activation_bytes) / d.bandwidth +
                        (kv > 0 ? kv / d.attention_bandwidth : 0);
  return std::max(memory, op.flops / d.flops) + d.op_overhead_s;
}

struct StepCost {
  double seconds = 0;
  StepGraph graph;
  SimResult sim;
};

// One step of all layers on the device, as a graph: one task per layer
// (its ops' times summed) and the embedding/LM head. `ops_of(layer)` gives
// the layer's operations.
template <typename OpsOf>
absl::StatusOr<StepCost> SimulateStep(const ModelCost& m, const Device& d, OpsOf ops_of,
                                      const std::vector<OpCost>& head_tail) {
  StepCost s;
  TaskId prev = -1;
  auto add = [&](std::string name, double seconds) {
    std::vector<TaskId> deps;
    if (prev >= 0) deps.push_back(prev);
    prev = s.graph.Add(std::move(name), d.resource, seconds, std::move(deps));
  };
  add("embedding", OpSeconds(head_tail[0], d));
  for (int64_t l = 0; l < m.config().num_layers; ++l) {
    double t = 0;
    for (const OpCost& op : ops_of(l)) t += OpSeconds(op, d);
    add(absl::StrCat("L", l), t);
  }
  add("norm + lm_head", OpSeconds(head_tail[1], d) + OpSeconds(head_tail[2], d));
  TANDEM_ASSIGN_OR_RETURN(s.sim, Simulate(s.graph));
  s.seconds = s.sim.makespan_s;
  return s;
}

absl::StatusOr<FamilyPlan> PlanOnDevice(const PlanInput& in, const Device& d) {
  const ModelCost& m = *in.model;
  const Workload& w = *in.workload;
  TANDEM_RETURN_IF_ERROR(w.Validate());
  const ModelConfig& c = m.config();
  const double weights = m.total_weight_bytes();
  const double kv_per_seq = m.kv_bytes_per_token() * static_cast<double>(w.longest_prompt() + w.gen_len);
  // Prefill runs one prompt at a time (its activations are the peak).
  const double prefill_act = ActivationBytes(m, static_cast<double>(w.longest_prompt()), 1);
  const double free_for_kv = d.memory_bytes - weights;
  if (free_for_kv < kv_per_seq + prefill_act) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the weights (%.1f GB) and one sequence's KV (%.2f GB) do not fit in %.1f GB",
        d.name, weights / 1e9, kv_per_seq / 1e9, d.memory_bytes / 1e9));
  }
  int64_t max_n = 1;
  while (max_n < 4096 &&
         free_for_kv >= static_cast<double>(max_n + 1) * kv_per_seq +
                            std::max(prefill_act, ActivationBytes(m, static_cast<double>(max_n + 1),
                                                                  static_cast<double>(max_n + 1)))) {
    ++max_n;
  }
  if (w.max_batch > 0) max_n = std::min(max_n, w.max_batch);

  // Candidate batch sizes: powers of two and the largest that fits.
  std::vector<int64_t> candidates;
  for (int64_t n = 1; n < max_n; n *= 2) candidates.push_back(n);
  candidates.push_back(max_n);

  const double context = w.mean_decode_context();
  std::vector<OpCost> head = m.HeadAndTail(1, 1);
  FamilyPlan best;
  bool have = false;
  bool best_meets_slo = false;
  for (int64_t n : candidates) {
    std::vector<OpCost> head_tail = m.HeadAndTail(n, n);
    TANDEM_ASSIGN_OR_RETURN(
        StepCost decode,
        SimulateStep(m, d, [&](int64_t l) { return m.DecodeLayer(l, n, context); }, head_tail));
    // Prefill: one prompt per step (padded to the longest for simplicity),
    // n of them.
    TANDEM_ASSIGN_OR_RETURN(
        StepCost prefill,
        SimulateStep(m, d, [&](int64_t l) { return m.PrefillLayer(l, 1, w.longest_prompt()); },
                     m.HeadAndTail(w.longest_prompt(), 1)));
    const double prefill_s = prefill.seconds * static_cast<double>(n);
    const double decode_s = decode.seconds * static_cast<double>(w.gen_len);
    const double throughput = static_cast<double>(n * w.gen_len) / (prefill_s + decode_s);
    const bool meets_slo =
        w.objective != Objective::kThroughputUnderItlSlo || decode.seconds <= w.slo_itl_s;
    // Keep the best throughput among plans meeting the SLO; while none
    // does, the one with the lowest latency.
    bool better;
    if (!have) {
      better = true;
    } else if (meets_slo != best_meets_slo) {
      better = meets_slo;
    } else if (meets_slo) {
      better = throughput > best.policy.prediction().throughput_tokens_per_s();
    } else {
      better = decode.seconds < best.policy.prediction().inter_token_latency_seconds();
    }
    if (!better) continue;
    have = true;
    best_meets_slo = meets_slo;
    FamilyPlan p;
    proto::Policy& pol = p.policy;
    pol.set_family(d.family);
    pol.set_batch_size(n);
    pol.set_micro_batch_size(n);
    pol.set_num_micro_batches(1);
    const bool gpu = d.family == proto::GPU_RESIDENT;
    pol.set_attention_on_gpu(gpu);
    pol.set_ffn_on_gpu(gpu);
    pol.set_weights_gpu_fraction(gpu ? 1.0 : 0.0);
    pol.set_kv_gpu_fraction(gpu ? 1.0 : 0.0);
    pol.set_kv_block_tokens(16);
    const int64_t blocks = n * ((w.longest_prompt() + w.gen_len + 15) / 16);
    (gpu ? pol.set_gpu_kv_blocks(blocks) : pol.set_cpu_kv_blocks(blocks));
    pol.set_prefill_token_budget(w.longest_prompt());
    pol.set_prefill_gpu_tokens(gpu ? w.longest_prompt() : 0);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      proto::LayerPolicy* lp = pol.add_layers();
      lp->set_layer(static_cast<int32_t>(l));
      lp->set_attention_device(gpu ? proto::GPU : proto::CPU);
      lp->set_attention_weights_on_gpu(gpu);
      (gpu ? lp->set_gg_fraction(1.0) : lp->set_cc_fraction(1.0));
      if (gpu && c.is_moe()) lp->set_expert_cache_slots(static_cast<int32_t>(c.num_experts));
    }
    proto::Prediction* pr = pol.mutable_prediction();
    pr->set_throughput_tokens_per_s(throughput);
    pr->set_decode_step_seconds(decode.seconds);
    pr->set_inter_token_latency_seconds(decode.seconds);
    pr->set_prefill_seconds(prefill_s);
    pr->set_bottleneck(std::string(ResourceName(d.resource)));
    const double act = std::max(prefill_act, ActivationBytes(m, static_cast<double>(n), static_cast<double>(n)));
    const int64_t used = static_cast<int64_t>(weights + static_cast<double>(n) * kv_per_seq + act);
    (gpu ? pr->set_gpu_memory_bytes(used) : pr->set_cpu_memory_bytes(used));
    if (gpu) pr->set_cpu_memory_bytes(0);
    for (int r = 0; r < kNumResources; ++r) {
      if (decode.sim.busy_s[r] > 0) {
        (*pr->mutable_busy_seconds())[std::string(ResourceName(static_cast<Resource>(r)))] =
            decode.sim.busy_s[r];
      }
    }
    pol.set_rationale(absl::StrFormat(
        "the whole model (%.1f GB) lives on the %s; batch %d is the %s", weights / 1e9, d.name,
        n,
        n == max_n ? "most its memory holds"
                   : (meets_slo ? "best within the latency SLO" : "fastest per token")));
    p.decode_step = std::move(decode.graph);
    p.decode_sim = std::move(decode.sim);
    best = std::move(p);
  }
  return best;
}

}  // namespace

absl::StatusOr<FamilyPlan> PlanGpuResident(const PlanInput& in) {
  const HardwareProfile& h = *in.hardware;
  if (!h.has_gpu()) return absl::FailedPreconditionError("GPU-resident: the machine has no GPU");
  const double g = h.gpu.count;
  Device d{.family = proto::GPU_RESIDENT,
           .resource = Resource::kGpu,
           .memory_bytes = static_cast<double>(h.gpu.memory_bytes) * g,
           .bandwidth = h.gpu.memory_bandwidth * g,
           .attention_bandwidth = h.gpu.memory_bandwidth * g,
           .flops = h.gpu.bf16_flops * g,
           .op_overhead_s = h.gpu.launch_overhead_s,
           .name = "GPU"};
  return PlanOnDevice(in, d);
}

absl::StatusOr<FamilyPlan> PlanHostDevice(const PlanInput& in) {
  const HardwareProfile& h = *in.hardware;
  Device d{.family = proto::HOST_DEVICE,
           .resource = Resource::kCpu,
           .memory_bytes = static_cast<double>(h.cpu.memory_bytes),
           .bandwidth = h.cpu.memory_bandwidth,
           .attention_bandwidth = h.CpuAttentionBandwidth(),
           .flops = h.cpu.bf16_flops > 0 ? h.cpu.bf16_flops : h.cpu.f32_flops,
           .op_overhead_s = h.cpu.op_overhead_s,
           .name = "CPU"};
  return PlanOnDevice(in, d);
}

}  // namespace tandem::planner
