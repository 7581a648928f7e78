#include "coordinator/planner/klotski/klotski_model.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/planner/cost/roofline.h"

namespace tandem::planner {
namespace {

// Kernels of one expert's SwiGLU: gate/up GEMM, activation, down GEMM.
constexpr int kExpertKernels = 3;

// GPU kernels at their roofline, never below the launch cost.
double GpuSeconds(double flops, double bytes, const HardwareProfile& hw,
                  int kernels = 1) {
  return GpuKernelSeconds(flops, bytes, hw, kernels);
}
double GpuOpSeconds(const OpCost& op, const HardwareProfile& hw) {
  return GpuKernelSeconds(op.flops, op.bytes(), hw);
}

double KvBytesPerSequence(const ModelCost& m, const Workload& w) {
  return m.kv_bytes_per_token() *
         static_cast<double>(w.longest_prompt() + w.gen_len);
}

// Activations at the prefill peak (the decode peak is the same with one
// token per sequence, so never larger): x and y of every token of the group,
// one batch's attention working set, one expert's intermediate over one
// batch's tokens (the port loops over batches inside each expert; worst case
// every token of the batch picks it), and one batch's fp32 logits.
double ActivationBytes(const ModelCost& m, const Workload& w, int bs, int n) {
  const ModelConfig& c = m.config();
  const double ab = m.options().activation_bytes_per_element;
  const double h = static_cast<double>(c.hidden_size);
  const double batch_tokens =
      static_cast<double>(bs) * static_cast<double>(w.longest_prompt());
  const double group_tokens = static_cast<double>(n) * batch_tokens;
  const double attention_ws = batch_tokens *
                              (2.0 * static_cast<double>(c.q_dim()) +
                               2.0 * static_cast<double>(c.kv_dim()) + h) *
                              ab;
  const double expert_ws =
      batch_tokens * 2.0 * static_cast<double>(c.moe_intermediate_size) * ab;
  const double logits =
      static_cast<double>(bs) * static_cast<double>(c.vocab_size) * 4.0;
  return 2.0 * group_tokens * h * ab + attention_ws + expert_ws + logits;
}

// Weights that stay on the GPU whatever the placement: embedding, LM head,
// norms, gates and shared experts.
double FixedResidentBytes(const ModelCost& m) {
  const ModelConfig& c = m.config();
  const double wb = m.options().weight_bytes_per_element;
  const double layers = static_cast<double>(c.num_layers);
  const double norms =
      (2.0 * layers + 1.0) * static_cast<double>(c.hidden_size) * wb;
  return m.embedding_bytes() + m.lm_head_bytes() + norms +
         layers * (m.router_bytes() + m.shared_expert_bytes());
}

}  // namespace

std::string KlotskiMemory::ToString() const {
  return absl::StrFormat(
      "GPU %.2f GB (weights %.2f, buffers %.2f, KV %.2f, activations %.2f, "
      "reserve %.2f); "
      "host %.2f GB (weights %.2f, KV %.2f, reserve %.2f); KV on %s, attention "
      "%s%s",
      gpu_total() / 1e9, gpu_resident_weights / 1e9, gpu_weight_buffers / 1e9,
      gpu_kv / 1e9, gpu_activations / 1e9, gpu_reserve / 1e9,
      host_total() / 1e9, host_weights / 1e9, host_kv / 1e9, host_reserve / 1e9,
      placement.kv_on_gpu ? "GPU" : "host",
      placement.attention_resident ? "resident" : "streamed",
      fits ? "" : " (does not fit)");
}

KlotskiMemory KlotskiMemoryFor(const ModelCost& m, const HardwareProfile& hw,
                               const Workload& w, const KlotskiOptions& o,
                               int bs, int n) {
  const ModelConfig& c = m.config();
  const double layers = static_cast<double>(c.num_layers);
  const int k = o.hot_experts > 0 ? o.hot_experts
                                  : static_cast<int>(c.num_experts_per_tok);
  const double kv_all = static_cast<double>(n) * bs * KvBytesPerSequence(m, w);
  // Two batches' KV of one layer: the KV stream loads batch k+1 while batch
  // k computes.
  const double kv_staging = 2.0 * bs * m.kv_bytes_per_token_layer() *
                            static_cast<double>(w.longest_prompt() + w.gen_len);
  const double experts_buffers =
      static_cast<double>(k + o.cold_buffers) * m.expert_bytes();
  const double attention_all = layers * m.attention_weight_bytes();

  const KlotskiPlacement candidates[] = {
      {true, true}, {false, true}, {false, false}};
  KlotskiMemory mem;
  for (const KlotskiPlacement& p : candidates) {
    mem = KlotskiMemory{};
    mem.placement = p;
    mem.gpu_resident_weights =
        FixedResidentBytes(m) + (p.attention_resident ? attention_all : 0);
    mem.gpu_weight_buffers =
        experts_buffers +
        (p.attention_resident ? 0 : 2.0 * m.attention_weight_bytes());
    mem.gpu_kv = p.kv_on_gpu ? kv_all : kv_staging;
    mem.gpu_activations = ActivationBytes(m, w, bs, n);
    mem.gpu_reserve = o.gpu_reserve_bytes;
    mem.host_weights =
        std::max(0.0, m.total_weight_bytes() - mem.gpu_resident_weights);
    mem.host_kv = p.kv_on_gpu ? 0 : kv_all;
    mem.host_reserve = o.host_reserve_bytes;
    mem.fits = mem.gpu_total() <= static_cast<double>(hw.gpu.memory_bytes) &&
               mem.host_total() <= static_cast<double>(hw.cpu.memory_bytes);
    if (mem.fits) break;
  }
  return mem;
}

absl::StatusOr<KlotskiCosts> KlotskiCostsFor(const ModelCost& m,
                                             const HardwareProfile& hw,
                                             const Workload& w,
                                             KlotskiPhase phase, int bs, int n,
                                             const KlotskiPlacement& placement,
                                             int hot_experts) {
  const ModelConfig& c = m.config();
  if (!c.is_moe()) {
    return absl::FailedPreconditionError(
        "Klotski: the model is dense; its pipeline schedules experts");
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) {
      return absl::FailedPreconditionError(
          absl::StrCat("Klotski: layer ", l,
                       " is dense; this planner models MoE blocks only"));
    }
  }
  TANDEM_RETURN_IF_ERROR(CheckGpuAndLink(hw, "Klotski"));
  if (bs < 1 || n < 1) {
    return absl::InvalidArgumentError("Klotski: bs and n must be >= 1");
  }

  KlotskiCosts k;
  k.phase = phase;
  k.bs = bs;
  k.n = n;
  k.placement = placement;
  k.num_layers = static_cast<int>(c.num_layers);
  k.hot_experts = std::min<int>(hot_experts, static_cast<int>(c.num_experts));

  const bool prefill = phase == KlotskiPhase::kPrefill;
  const double tokens_per_seq =
      prefill ? static_cast<double>(w.prompt_len) : 1.0;
  const double batch_tokens = bs * tokens_per_seq;
  const double group_tokens = n * batch_tokens;
  const std::vector<OpCost> ops =
      prefill ? m.PrefillLayer(0, bs, w.prompt_len)
              : m.DecodeLayer(0, bs, w.mean_decode_context());
  for (const OpCost& op : ops) {
    switch (op.kind) {
      case OpKind::kAttentionNorm:
      case OpKind::kQkvProjection:
      case OpKind::kAttentionCore:
      case OpKind::kOutputProjection:
        k.attention_compute_s += GpuOpSeconds(op, hw);
        break;
      case OpKind::kFfnNorm:
      case OpKind::kRouter:
        k.gate_s += GpuOpSeconds(op, hw);
        break;
      default:
        break;  // experts are costed per expert below
    }
    if (op.kind == OpKind::kAttentionCore && !placement.kv_on_gpu) {
      // Decode reads the batch's cached KV from the host; both phases write
      // the new K/V back to it.
      k.kv_load_s = prefill ? 0 : H2dSeconds(op.kv_read_bytes, hw);
      k.kv_store_s = D2hSeconds(op.kv_write_bytes, hw);
    }
  }

  const double topk = static_cast<double>(c.num_experts_per_tok);
  k.active_experts = m.ExpectedActiveExperts(group_tokens);
  k.cold_experts = static_cast<int>(
      std::max(0.0, std::ceil(k.active_experts - k.hot_experts - 1e-9)));
  k.tokens_per_expert =
      k.active_experts > 0 ? group_tokens * topk / k.active_experts : 0;
  const double ab = m.options().activation_bytes_per_element;
  const double h = static_cast<double>(c.hidden_size);
  k.expert_compute_s =
      GpuSeconds(k.tokens_per_expert * m.expert_flops_per_token(),
                 m.expert_bytes() + 2.0 * k.tokens_per_expert * h * ab, hw,
                 kExpertKernels);
  if (m.shared_expert_bytes() > 0) {
    k.shared_expert_s =
        GpuSeconds(group_tokens * m.shared_expert_flops_per_token(),
                   m.shared_expert_bytes() + 2.0 * group_tokens * h * ab, hw,
                   kExpertKernels);
  }
  // Which batch's gate reveals each cold expert: the first batch after which
  // the expected number of distinct experts seen reaches K + m (rounded).
  for (int mth = 1; mth <= k.cold_experts; ++mth) {
    int b = 0;
    while (b < n - 1 && m.ExpectedActiveExperts((b + 1) * batch_tokens) <
                            k.hot_experts + mth - 0.5) {
      ++b;
    }
    k.cold_revealed_by.push_back(b);
  }
  k.expert_io_s = H2dSeconds(m.expert_bytes(), hw);
  k.gate_io_s = 0;  // gates resident (see klotski_model.h)
  k.attention_io_s = placement.attention_resident
                         ? 0
                         : H2dSeconds(m.attention_weight_bytes(), hw);

  const int64_t logit_rows = static_cast<int64_t>(n) * bs;
  const std::vector<OpCost> ends = m.HeadAndTail(
      static_cast<int64_t>(std::llround(group_tokens)), logit_rows);
  k.embedding_s = GpuOpSeconds(ends[0], hw);
  k.head_s = GpuOpSeconds(ends[1], hw) + GpuOpSeconds(ends[2], hw);
  return k;
}

KlotskiLayerTimes ToLayerTimes(const KlotskiCosts& c) {
  KlotskiLayerTimes t;
  t.attention_s = std::max(c.attention_compute_s, c.kv_load_s);
  t.gate_s = c.gate_s;
  const double hot_used =
      std::min(static_cast<double>(c.hot_experts), c.active_experts);
  t.hot_compute_s = hot_used * c.expert_compute_s + c.shared_expert_s;
  t.cold_compute_s.assign(static_cast<size_t>(c.cold_experts),
                          c.expert_compute_s);
  t.gate_io_s = c.gate_io_s;
  t.expert_io_s = c.expert_io_s;
  t.attention_io_s = c.attention_io_s;
  t.hot_experts = c.hot_experts;
  return t;
}

}  // namespace tandem::planner
