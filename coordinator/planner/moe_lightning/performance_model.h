// MoE-Lightning's performance model (§4.2, Eq. 12–14; the digest's §2.4
// formulation): for one policy point (N, μ, A_g, F_g, r_w, r_c) the time of
// one layer of a decode step on each resource, the prefill time, the GPU
// and CPU memory the policy needs, and the resulting throughput
// N·n / (T_prefill + n·T_step) (n − 1 steps when the prefill yields the
// first token). FLOPs and bytes are ModelCost's
// (theoretical, from the config); rates are the HardwareProfile's. Nothing
// is fitted.
//
// Choices where the paper is vague (each repeated where it is made):
//  - r_w is a fraction of every layer's weights (attention projections and
//    norms first, then the FFN), so each layer streams (1−r_w)·W_layer and
//    the GPU double buffer is 2·(1−r_w)·W_layer (Appendix A.1).
//  - T_step = Σ_layers max(h2d, d2h, cpu, gpu, launch, chain) + the LM
//    head: the paper's Eq. 12 max with the D2H copy engine and the
//    kernel-launch thread added as resources of their own (they are, in
//    CGOPipe), and one micro-batch's dependency chain through the layer,
//    which no overlap can hide when there are few micro-batches.
//  - Prefill is all on the GPU with every non-resident weight streamed once
//    per layer (the zigzag order shares each loaded layer among all prefill
//    micro-batches of μ prompts) and all KV offloaded to the CPU.
//  - ModelOptions' defaults describe Tandem's executor;
//    PaperImplementationOptions() the published system's, for checking the
//    model against the paper's figures.
#ifndef TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_PERFORMANCE_MODEL_H_
#define TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_PERFORMANCE_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/hardware_profile.h"
#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/cost/workload.h"

namespace tandem::planner::ml {

// The paper's policy 𝒫 (Table 1).
struct PolicyPoint {
  int64_t batch_size = 1;           // N: sequences decoded per step
  int64_t micro_batch_size = 1;     // μ: sequences per GPU kernel execution
  bool attention_on_gpu = false;    // A_g
  bool ffn_on_gpu = true;           // F_g
  double weights_gpu_fraction = 0;  // r_w
  double kv_gpu_fraction = 0;       // r_c (only with A_g)
  int64_t num_micro_batches() const {
    return (batch_size + micro_batch_size - 1) / micro_batch_size;
  }
};

struct ModelOptions {
  // MoE-Lightning(p): every prompt padded to the workload's longest (the
  // published numbers are for this variant). Otherwise variable-length
  // batching (Algorithm 2) and the average prompt length.
  bool padded = false;
  // Share of the GPU's memory the policy may use: vLLM's default
  // gpu_memory_utilization (the paper's implementation is built on vLLM);
  // the rest is CUDA context, allocator slack and fragmentation.
  double gpu_memory_utilization = 0.9;
  // Share of host DRAM for weights, KV and staging; the rest is the OS,
  // the processes and the page cache.
  double cpu_memory_utilization = 0.9;
  // Tandem's host weight store is pinned shared memory (DESIGN.md), so
  // pages go to the GPU by DMA straight from it. false models the paper's
  // two hops (Appendix A.1): a CPU memcpy of each page into a pinned
  // staging buffer (three pages: Algorithm 1 copies two ahead of the DMA)
  // before the DMA, which costs host memory and CPU time and bandwidth,
  // shared with the CPU attention.
  bool pinned_host_weights = true;
  // Where the zigzag prefill keeps the hidden states of the whole batch
  // between layers (every micro-batch passes layer i before layer i+1
  // starts, so all N·s of them exist at once). false (Tandem): on the
  // host, copied in before each layer and out after it, overlapped with
  // compute. true (the paper's implementation): on the GPU, since its
  // prefill is "all on GPU; every micro-batch's KV is offloaded to CPU"
  // (digest §1.1): only the KV is said to leave the GPU. FlexGen, whose
  // zigzag order it takes, charges the same term to the GPU for the share
  // hg of activations it keeps there (experimental/cost_model.py:
  // gpu_home^p = ... + 2·s·h1·bls·hg). Counted as the two tensors a vLLM
  // decoder layer hands the next (hidden_states and residual, [tokens, h]
  // each; "any vLLM model class should work", §3): 2·h·dt a token of the
  // batch. They then cross PCIe in neither direction.
  bool prefill_hidden_on_gpu = false;
  // Decode steps after the prefill: n (false, Tandem's accounting so far)
  // or n − 1 (true): the prefill's LM head already yields each sequence's
  // first token, as in FlexGen's loop and cost model (T = T_pre·l +
  // T_gen·(n − 1)·l), whose generation loop MoE-Lightning's zigzag order
  // comes from. The paper's metric divides the N·n generated tokens by
  // prefill + decode time either way.
  bool first_token_from_prefill = false;
  // Where the token-embedding table lives. false (Tandem): on the host,
  // where the lookup runs. true (the paper's): on the GPU, as a vLLM model
  // class keeps it (its embedding is a GPU module, and the paper's prefill
  // is all on the GPU); Mixtral's 32000 x 4096 fp16 table is 262 MB.
  bool embedding_on_gpu = false;
};

// The published system as the digest describes its implementation, for
// reproducing the paper's figures (MoE-Lightning(p), Table 4); Tandem's
// defaults above differ where Tandem's executor does:
//  - padded = true: MoE-Lightning(p) pads every prompt to s_max (§1.7).
//  - pinned_host_weights = false: two hops, a CPU memcpy of each page from
//    pageable to pinned memory, then the DMA (Appendix A.1).
//  - prefill_hidden_on_gpu = true: prefill all on the GPU, only the KV
//    offloaded (§1.1).
//  - first_token_from_prefill = true: n − 1 decode steps (FlexGen's loop).
//  - embedding_on_gpu = true: the vLLM model class's embedding module.
// Memory utilisation stays vLLM's default 0.9 (the implementation is
// built on vLLM). Rates stay the profile's: the digest gives no attained
// rate of the paper's kernels (its HRM, too, takes profiled peaks and
// ignores kernel efficiency, §5).
ModelOptions PaperImplementationOptions();

// One layer of one decode step. Per-micro-batch durations feed the CGOPipe
// graph; per-layer totals are what Eq. 12 takes the max of.
struct LayerTimes {
  // Per micro-batch (seconds).
  // GPU: norm + QKV projection (+ attention when A_g).
  double pre_attention_ub = 0;
  // GPU: O projection + norm + router + the GPU's FFN share.
  double post_attention_ub = 0;
  double cpu_attention_ub = 0;  // CPU: attention over the CPU KV (A_g = 0)
  double cpu_ffn_ub = 0;        // CPU: the host FFN share (F_g = 0)
  double qkv_offload_ub = 0;    // D2H, D1: new q, k, v (A_g = 0)
  double hidden_load_ub = 0;    // H2D, D2: attention output back (A_g = 0)
  // H2D, D4: the CPU share of the KV, and D2H: its new K/V (A_g, r_c < 1).
  double kv_load_ub = 0;
  double kv_offload_ub = 0;
  double ffn_offload_ub = 0;  // D2H: FFN input to the CPU (F_g = 0)
  double ffn_load_ub = 0;     // H2D: FFN output back (F_g = 0)
  // The launcher thread: kernels before and after attention.
  double launch_pre_ub = 0;
  double launch_post_ub = 0;
  double page_load = 0;   // H2D, D3: one page of the next layer's weights
  double page_stage = 0;  // CPU: memcpy of a page to pinned memory (two-hop)
  // Pages PreAttn waits for (the attention weights when not resident).
  double attention_pages = 0;
  int64_t num_micro_batches = 0;

  // Per layer (seconds), Eq. 12–14.
  double h2d = 0;
  double d2h = 0;
  double cpu = 0;
  double gpu = 0;
  double launch = 0;
  // One micro-batch's dependency chain through the layer (PreAttn, D1,
  // CPU attention, D2, PostAttn, and the host FFN round trip): it must
  // finish before the same micro-batch enters the next layer, so no
  // pipelining hides it. Eq. 12 assumes perfect overlap, which needs
  // several micro-batches (the digest: "real overlap needs >= 3"); with
  // one or two this term is what binds.
  double chain = 0;
  // The max of the six, and its name: "h2d", "d2h", "cpu", "gpu", "launch"
  // or "chain".
  double seconds() const;
  const char* bottleneck() const;
};

// Bytes a policy needs, by part.
struct MemoryUse {
  double gpu_resident_weights = 0;  // r_w·W (+ LM head)
  double gpu_weight_buffer = 0;  // 2·(1−r_w)·W_layer, two layers of pages
  double gpu_decode_activations = 0;
  double gpu_prefill_peak = 0;
  double gpu_kv = 0;              // A_g·r_c·KV
  double cpu_weights = 0;         // (1−r_w)·W (+ embedding table)
  double cpu_kv = 0;              // (1−A_g·r_c)·KV at the end of decode
  double cpu_kv_prompt = 0;       // the same KV after prefill (prompts only)
  double cpu_prefill_hidden = 0;  // prefill hidden states parked between layers
  double cpu_staging = 0;         // pinned pages (two-hop only)
  double gpu() const;
  double cpu() const;
};

struct Estimate {
  LayerTimes layer;          // the costliest layer kind's times
  double decode_step_s = 0;  // Σ layers + LM head: also the inter-token latency
  double prefill_s = 0;      // the whole batch
  double throughput = 0;     // N·n / (prefill + n·step)
  MemoryUse memory;
  bool fits = false;       // memory within both budgets
  std::string bottleneck;  // of the costliest layer kind
};

class PerformanceModel {
 public:
  // The pointers must outlive the model. InvalidArgument for a workload or
  // profile that cannot be modelled (no GPU, zero rates, no generation).
  static absl::StatusOr<PerformanceModel> Create(
      const ModelCost* model, const HardwareProfile* hardware,
      const Workload* workload, const ModelOptions& options);

  const ModelOptions& options() const { return options_; }
  const ModelCost& model() const { return *model_; }
  const HardwareProfile& hardware() const { return *hw_; }
  const Workload& workload() const { return *workload_; }

  // Prompt tokens each sequence's KV holds (s_max padded, s otherwise) and
  // the mean context a decode step attends over (that + n/2).
  double kv_prompt_len() const;
  double decode_context() const;
  // Prompt tokens one prefill micro-batch of μ prompts runs.
  double prefill_tokens_per_micro_batch(int64_t mu) const;

  // Decode steps one batch runs: n, or n − 1 with first_token_from_prefill.
  double decode_steps() const;

  double gpu_budget() const;  // bytes
  double cpu_budget() const;

  LayerTimes DecodeLayer(int64_t layer, const PolicyPoint& p) const;
  double DecodeStepSeconds(const PolicyPoint& p) const;
  // `bottleneck`, when given, gets the binding resource of the layer kind
  // that takes longest in all ("gpu", "h2d", "d2h", "launch" or "cpu").
  double PrefillSeconds(const PolicyPoint& p, std::string* bottleneck = nullptr) const;
  MemoryUse Memory(const PolicyPoint& p) const;
  Estimate Evaluate(const PolicyPoint& p) const;

  // The feasible range of r_w for fixed (N, μ, A_g, F_g) with r_c = 0:
  // both memories are linear in r_w (GPU grows, host shrinks), so it is an
  // interval. false when it is empty (the point does not fit at any r_w).
  // With A_g, KV kept on the GPU could also relieve the host; that is not
  // tried (GPU attention with more KV than the host holds is outside the
  // paper's space, where all KV lives in CPU memory).
  bool WeightsFractionRange(const PolicyPoint& p, double* lo, double* hi) const;
  // With A_g, the largest r_c the GPU memory left at p's r_w holds (r_w is
  // served first: a GPU byte of weights saves more than one byte of
  // transfer per step, as the double buffer shrinks too, and shortens
  // prefill, while a byte of KV saves exactly one). Leaves r_c = 0 without
  // A_g. Returns whether p then fits both memories.
  bool FillKvFraction(PolicyPoint* p) const;

  // Weight bytes of all layers (what r_w is a fraction of), and of one layer.
  double layers_weight_bytes() const { return layers_weight_bytes_; }
  double max_layer_weight_bytes() const { return max_layer_bytes_; }
  // Bytes of one layer's attention projections and norms (resident first).
  double attention_part_bytes() const;
  double kv_total_bytes(int64_t batch) const;
  // Resident bytes of layer `layer` at r_w, split attention part first.
  void SplitResident(int64_t layer, double r_w, double* attention_resident,
                     double* ffn_resident) const;
  // The LM head (final norm + logits) of every micro-batch in one decode
  // step: the part of DecodeStepSeconds outside the layers.
  double DecodeHeadSeconds(const PolicyPoint& p) const;
  // The first layer of the costliest kind (MoE or dense) at p.
  int64_t CostliestLayer(const PolicyPoint& p) const;

 private:
  PerformanceModel(const ModelCost* m, const HardwareProfile* h,
                   const Workload* w, const ModelOptions& o);
  double GpuSeconds(double flops, double bytes) const;
  double LmHeadSeconds(int64_t rows) const;
  double ActivationBytes(double tokens) const;

  const ModelCost* model_;
  const HardwareProfile* hw_;
  const Workload* workload_;
  ModelOptions options_;
  double layers_weight_bytes_ = 0;
  double max_layer_bytes_ = 0;
  // Layer kinds: the first MoE layer and the first dense layer, with counts
  // (every layer of a kind costs the same).
  int64_t kind_layer_[2] = {-1, -1};
  int64_t kind_count_[2] = {0, 0};
  // Effective rates (all GPUs of the profile act as one, as the paper's
  // tensor-parallel treatment does).
  double gpu_flops_ = 0, gpu_bw_ = 0, h2d_bw_ = 0, d2h_bw_ = 0;
  double cpu_attn_bw_ = 0, cpu_attn_flops_ = 0, cpu_mem_bw_ = 0,
         cpu_ffn_flops_ = 0;
};

}  // namespace tandem::planner::ml

#endif  // TANDEM_COORDINATOR_PLANNER_MOE_LIGHTNING_PERFORMANCE_MODEL_H_
