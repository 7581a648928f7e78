// Neo's per-layer costs on a profiled machine: the planner's model of an
// iteration (neo_planner.cc) and the service's per-step sub-batch choice
// (neo_sub_batches.h) ask the same functions.
#ifndef TANDEM_COORDINATOR_PLANNER_NEO_NEO_COSTS_H_
#define TANDEM_COORDINATOR_PLANNER_NEO_NEO_COSTS_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/hardware_profile.h"
#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/cost/roofline.h"
#include "coordinator/planner/neo/neo_iteration.h"

namespace tandem::planner {

// Seconds per layer of Neo's pieces on the profiled machine, averaged over
// the layers (a model may mix dense and MoE layers).
class NeoCosts {
 public:
  // `m` and `hw` are not copied: they must outlive this.
  NeoCosts(const ModelCost& m, const HardwareProfile& hw) : m_(m), hw_(hw) {
    const ModelConfig& c = m.config();
    int64_t moe = -1, dense = -1, moe_n = 0, dense_n = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      if (c.IsMoeLayer(l)) {
        if (moe < 0) moe = l;
        ++moe_n;
      } else {
        if (dense < 0) dense = l;
        ++dense_n;
      }
    }
    if (moe >= 0) kinds_.push_back({moe, moe_n});
    if (dense >= 0) kinds_.push_back({dense, dense_n});
    layers_ = static_cast<double>(c.num_layers);
  }

  // A kernel's roofline time, never below its launch (async launches: a
  // run of small kernels goes at the rate the host issues them).
  double Gpu(const OpCost& op) const {
    return GpuKernelSeconds(op.flops, op.bytes(), hw_);
  }
  // "pr": norm, QKV projection (and RoPE, KV store: folded in).
  double Pre(int64_t tokens) const { return Linear(tokens, true); }
  // "po": O projection, FFN norm, router, experts / MLP.
  double Post(int64_t tokens) const { return Linear(tokens, false); }
  double GpuDecodeAttention(int64_t requests, int64_t context) const {
    if (requests == 0) return 0;
    return Gpu(AttentionOp(m_.DecodeLayer(kinds_[0].first, requests, 1.0),
                           requests, context));
  }
  double GpuPrefillAttention(int64_t prompt) const {
    for (const OpCost& op : m_.PrefillLayer(kinds_[0].first, 1, prompt)) {
      if (op.kind == OpKind::kAttentionCore) return Gpu(op);
    }
    return 0;
  }
  // Bandwidth-bound over the KV, fp32 math, plus one operator call.
  double CpuDecodeAttention(int64_t requests, int64_t context) const {
    if (requests == 0) return 0;
    const double n = static_cast<double>(context);
    const double flops = m_.attention_core_flops_per_key() * n;
    const double cpu_flops =
        hw_.cpu.f32_flops > 0 ? hw_.cpu.f32_flops : hw_.cpu.bf16_flops;
    const double compute = cpu_flops > 0 ? flops / cpu_flops : 0;
    return std::max(
               n * m_.kv_bytes_per_token_layer() / hw_.CpuAttentionBandwidth(),
               compute) +
           hw_.cpu.op_overhead_s;
  }
  double Embedding(int64_t rows) const {
    return Gpu(m_.HeadAndTail(rows, rows)[0]);
  }
  double Head(int64_t rows) const {
    const std::vector<OpCost> ends = m_.HeadAndTail(rows, rows);
    return Gpu(ends[1]) + Gpu(ends[2]);
  }
  // One prompt's prefill through the whole model.
  double PrefillOne(int64_t prompt) const {
    const std::vector<OpCost> ends = m_.HeadAndTail(prompt, 1);
    double s = Gpu(ends[0]) + Gpu(ends[1]) + Gpu(ends[2]);
    for (const auto& [layer, count] : kinds_) {
      double t = 0;
      for (const OpCost& op : m_.PrefillLayer(layer, 1, prompt)) t += Gpu(op);
      s += static_cast<double>(count) * t;
    }
    return s;
  }
  neo::IterationCosts Functions() const {
    neo::IterationCosts f;
    f.gpu_linear_s = [this](int64_t s) { return Pre(s) + Post(s); };
    f.gpu_decode_attention_s = [this](int64_t r, int64_t n) {
      return GpuDecodeAttention(r, n);
    };
    f.gpu_prefill_attention_s = [this](int64_t p) {
      return GpuPrefillAttention(p);
    };
    f.cpu_decode_attention_s = [this](int64_t r, int64_t n) {
      return CpuDecodeAttention(r, n);
    };
    return f;
  }

 private:
  double Linear(int64_t tokens, bool pre) const {
    if (tokens <= 0) return 0;
    // PlanIteration asks for the same row counts many times.
    std::vector<double>& memo = pre ? pre_memo_ : post_memo_;
    if (static_cast<size_t>(tokens) < memo.size() && memo[tokens] >= 0) {
      return memo[tokens];
    }
    const double s = ComputeLinear(tokens, pre);
    if (tokens < kMemoRows) {
      if (memo.size() <= static_cast<size_t>(tokens)) {
        memo.resize(static_cast<size_t>(tokens) + 1, -1.0);
      }
      memo[tokens] = s;
    }
    return s;
  }
  double ComputeLinear(int64_t tokens, bool pre) const {
    double s = 0;
    for (const auto& [layer, count] : kinds_) {
      double t = 0;
      for (const OpCost& op : m_.DecodeLayer(layer, tokens, 1.0)) {
        const bool is_pre = op.kind == OpKind::kAttentionNorm ||
                            op.kind == OpKind::kQkvProjection;
        if (op.kind == OpKind::kAttentionCore || is_pre != pre) continue;
        t += Gpu(op);
      }
      s += static_cast<double>(count) * t;
    }
    return s / layers_;
  }
  // The decode attention op of `requests` sequences with `context` keys in
  // all (DecodeLayer assumes one context for all; rebuild its bytes).
  OpCost AttentionOp(const std::vector<OpCost>& ops, int64_t requests,
                     int64_t context) const {
    OpCost a;
    for (const OpCost& op : ops) {
      if (op.kind == OpKind::kAttentionCore) a = op;
    }
    const double n = static_cast<double>(context);
    a.flops = m_.attention_core_flops_per_key() * n;
    a.kv_read_bytes = n * m_.kv_bytes_per_token_layer();
    a.kv_write_bytes =
        static_cast<double>(requests) * m_.kv_bytes_per_token_layer();
    return a;
  }

  static constexpr int64_t kMemoRows = 1 << 16;
  const ModelCost& m_;
  const HardwareProfile& hw_;
  std::vector<std::pair<int64_t, int64_t>>
      kinds_;  // (representative layer, count)
  double layers_ = 1;
  mutable std::vector<double> pre_memo_;  // [rows] seconds, -1 = not yet
  mutable std::vector<double> post_memo_;
};

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_NEO_NEO_COSTS_H_
