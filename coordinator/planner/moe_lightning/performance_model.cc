#include "coordinator/planner/moe_lightning/performance_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::planner::ml {

double LayerTimes::seconds() const {
  return std::max({h2d, d2h, cpu, gpu, launch, chain});
}

const char* LayerTimes::bottleneck() const {
  // Ties go to the GPU first: a policy at its balance point is reported as
  // bound by the resource the paper says binds there (the GPU roof).
  const double t = seconds();
  if (gpu >= t) return "gpu";
  if (h2d >= t) return "h2d";
  if (cpu >= t) return "cpu";
  if (d2h >= t) return "d2h";
  if (launch >= t) return "launch";
  return "chain";
}

double MemoryUse::gpu() const {
  return gpu_resident_weights + gpu_weight_buffer + gpu_decode_activations +
         gpu_prefill_peak + gpu_kv;
}

double MemoryUse::cpu() const {
  // During prefill the KV holds only the prompts but the hidden states of
  // every prefill micro-batch wait on the host between layers; afterwards
  // the hidden states are gone and the KV grows by n tokens a sequence.
  return cpu_weights + cpu_staging +
         std::max(cpu_kv, cpu_kv_prompt + cpu_prefill_hidden);
}

PerformanceModel::PerformanceModel(const ModelCost* m, const HardwareProfile* h,
                                   const Workload* w, const ModelOptions& o)
    : model_(m), hw_(h), workload_(w), options_(o) {}

absl::StatusOr<PerformanceModel> PerformanceModel::Create(
    const ModelCost* model, const HardwareProfile* hardware,
    const Workload* workload, const ModelOptions& options) {
  if (model == nullptr || hardware == nullptr || workload == nullptr) {
    return absl::InvalidArgumentError(
        "MoE-Lightning model: null model, hardware or workload");
  }
  TANDEM_RETURN_IF_ERROR(workload->Validate());
  if (workload->prompt_len < 1 || workload->gen_len < 1) {
    return absl::InvalidArgumentError(
        "MoE-Lightning model: needs prompt_len >= 1 and gen_len >= 1");
  }
  if (!hardware->has_gpu()) {
    return absl::FailedPreconditionError(
        "MoE-Lightning needs a GPU; the profile has none");
  }
  if (!(options.gpu_memory_utilization > 0 &&
        options.gpu_memory_utilization <= 1) ||
      !(options.cpu_memory_utilization > 0 &&
        options.cpu_memory_utilization <= 1)) {
    return absl::InvalidArgumentError(
        "MoE-Lightning model: memory utilization not in (0, 1]");
  }
  PerformanceModel pm(model, hardware, workload, options);
  const double gpus = hardware->gpu.count;
  // All GPUs act as one with their figures summed, as the paper treats
  // tensor parallelism (§4); each GPU is assumed to have its own PCIe link.
  pm.gpu_flops_ = hardware->gpu.bf16_flops * gpus;
  pm.gpu_bw_ = hardware->gpu.memory_bandwidth * gpus;
  pm.h2d_bw_ = hardware->link.h2d_bandwidth * gpus;
  pm.d2h_bw_ =
      (hardware->link.d2h_bandwidth > 0 ? hardware->link.d2h_bandwidth
                                        : hardware->link.h2d_bandwidth) *
      gpus;
  pm.cpu_attn_bw_ = hardware->CpuAttentionBandwidth();
  // The paper's CPU attention computes in fp32 whatever the KV dtype
  // (§3.3 footnote); a CPU FFN runs in the weights' dtype when the CPU has
  // a rate for it.
  pm.cpu_attn_flops_ = hardware->cpu.f32_flops > 0 ? hardware->cpu.f32_flops
                                                   : hardware->cpu.bf16_flops;
  pm.cpu_ffn_flops_ = hardware->cpu.bf16_flops > 0 ? hardware->cpu.bf16_flops
                                                   : hardware->cpu.f32_flops;
  pm.cpu_mem_bw_ = hardware->cpu.memory_bandwidth;
  if (!(pm.gpu_flops_ > 0) || !(pm.gpu_bw_ > 0) || !(pm.h2d_bw_ > 0) ||
      !(pm.d2h_bw_ > 0) || !(pm.cpu_attn_bw_ > 0) ||
      !(pm.cpu_attn_flops_ > 0) || !(pm.cpu_mem_bw_ > 0) ||
      !(hardware->gpu.memory_bytes > 0) || !(hardware->cpu.memory_bytes > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoE-Lightning model: profile '", hardware->name,
                     "' lacks a GPU FLOP/s, GPU or CPU bandwidth, PCIe "
                     "bandwidth or memory size"));
  }
  const ModelConfig& c = model->config();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const double bytes = model->layer_weight_bytes(l);
    pm.layers_weight_bytes_ += bytes;
    pm.max_layer_bytes_ = std::max(pm.max_layer_bytes_, bytes);
    const int kind = c.IsMoeLayer(l) ? 0 : 1;
    if (pm.kind_layer_[kind] < 0) pm.kind_layer_[kind] = l;
    ++pm.kind_count_[kind];
  }
  return pm;
}

ModelOptions PaperImplementationOptions() {
  ModelOptions o;
  o.padded = true;
  o.pinned_host_weights = false;
  o.prefill_hidden_on_gpu = true;
  o.first_token_from_prefill = true;
  o.embedding_on_gpu = true;
  return o;
}

double PerformanceModel::decode_steps() const {
  const double n = static_cast<double>(workload_->gen_len);
  return options_.first_token_from_prefill ? n - 1 : n;
}

double PerformanceModel::kv_prompt_len() const {
  return static_cast<double>(options_.padded ? workload_->longest_prompt()
                                             : workload_->prompt_len);
}

double PerformanceModel::decode_context() const {
  return kv_prompt_len() + static_cast<double>(workload_->gen_len) / 2.0;
}

double PerformanceModel::prefill_tokens_per_micro_batch(int64_t mu) const {
  const double m = static_cast<double>(mu);
  const double longest = static_cast<double>(workload_->longest_prompt());
  if (options_.padded) return m * longest;
  // Algorithm 2 puts each prompt, longest first, into the partition with
  // the fewest tokens, so no partition ends more than one prompt above the
  // mean (the LPT bound): μ·s + s_max, and never more than μ·s_max.
  return std::min(m * longest,
                  m * static_cast<double>(workload_->prompt_len) + longest);
}

double PerformanceModel::gpu_budget() const {
  return static_cast<double>(hw_->gpu.memory_bytes) * hw_->gpu.count *
         options_.gpu_memory_utilization;
}

double PerformanceModel::cpu_budget() const {
  return static_cast<double>(hw_->cpu.memory_bytes) *
         options_.cpu_memory_utilization;
}

double PerformanceModel::attention_part_bytes() const {
  // The projections plus the layer's two norm weights: the part PreAttn
  // needs first, so it is made resident (or paged) first.
  return model_->attention_weight_bytes() +
         2.0 * static_cast<double>(model_->config().hidden_size) *
             model_->options().weight_bytes_per_element;
}

double PerformanceModel::kv_total_bytes(int64_t batch) const {
  return static_cast<double>(model_->config().num_layers) *
         static_cast<double>(batch) *
         (kv_prompt_len() + static_cast<double>(workload_->gen_len)) *
         model_->kv_bytes_per_token_layer();
}

double PerformanceModel::GpuSeconds(double flops, double bytes) const {
  // Eq. 14: T_x = max(comm_x, comp_x) on the GPU.
  return std::max(bytes / gpu_bw_, flops / gpu_flops_);
}

double PerformanceModel::LmHeadSeconds(int64_t rows) const {
  double t = 0;
  for (const OpCost& op : model_->HeadAndTail(rows, rows)) {
    // The embedding lookup runs on the host (the table stays in CPU
    // memory); its rows ride along with the first layer's inputs.
    if (op.kind == OpKind::kEmbedding) continue;
    t += GpuSeconds(op.flops, op.bytes()) + hw_->gpu.launch_overhead_s;
  }
  return t;
}

double PerformanceModel::ActivationBytes(double tokens) const {
  // Live tensors of one layer for `tokens` tokens: residual and normed
  // hidden states, q/k/v, the attention output, and the FFN's
  // intermediates. For MoE layers that is vLLM's fused_moe caches, per
  // routed copy: gate+up output (2·h2), the activated product (h2) and the
  // expert output (h); for dense layers gate, up and their product (3·h2).
  // Attention is assumed memory-efficient (no score matrix), as vLLM's
  // xformers/flash kernels are: on the paper's T4 (sm_75) vLLM runs
  // xFormers, on the L4 flash attention. (FlexGen's naive attention, whose
  // cost model counts 2·n_heads·s² bytes a sequence, would add 2·32·s B a
  // token: 16 KB at s = 256, 127 KB at s = 1984.) Nor are logits kept for
  // every prompt token: vLLM computes them for each sequence's last one.
  // Mixtral: 112,656 elements = 225,312 B a token, 188,416 B of them the
  // fused-MoE caches (top-2 x (2 x 14336 + 14336 + 4096) x 2 B).
  const ModelConfig& c = model_->config();
  const double ab = model_->options().activation_bytes_per_element;
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.q_dim()),
               kv = static_cast<double>(c.kv_dim());
  double ffn = 0;
  if (kind_count_[0] > 0) {
    const double h2 = static_cast<double>(c.moe_intermediate_size);
    ffn = static_cast<double>(c.num_experts_per_tok) * (3 * h2 + h) +
          static_cast<double>(c.num_experts) * 2;  // fp32 router logits
  }
  if (kind_count_[1] > 0)
    ffn = std::max(ffn, 3.0 * static_cast<double>(c.intermediate_size));
  return tokens * ab * (2 * h + q + 2 * kv + q + ffn);
}

void PerformanceModel::SplitResident(int64_t layer, double r_w,
                                     double* attention_resident,
                                     double* ffn_resident) const {
  const double resident = r_w * model_->layer_weight_bytes(layer);
  *attention_resident = std::min(resident, attention_part_bytes());
  *ffn_resident = std::max(0.0, resident - *attention_resident);
}

LayerTimes PerformanceModel::DecodeLayer(int64_t layer,
                                         const PolicyPoint& p) const {
  const ModelConfig& c = model_->config();
  const double ab = model_->options().activation_bytes_per_element;
  const double kv_tok = model_->kv_bytes_per_token_layer();
  const double mu = static_cast<double>(p.micro_batch_size);
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.q_dim()),
               kv = static_cast<double>(c.kv_dim());
  const double ctx = decode_context();
  const double h2d_lat = hw_->link.h2d_latency_s,
               d2h_lat = hw_->link.d2h_latency_s;
  const double launch = hw_->gpu.launch_overhead_s,
               cpu_op = hw_->cpu.op_overhead_s;

  LayerTimes t;
  t.num_micro_batches = p.num_micro_batches();
  const double n_ub = static_cast<double>(t.num_micro_batches);

  double attn_res = 0, ffn_res = 0;
  SplitResident(layer, p.weights_gpu_fraction, &attn_res, &ffn_res);
  const double attn_bytes = attention_part_bytes();
  const double ffn_bytes = model_->ffn_weight_bytes(layer);
  const double gpu_ffn_share =
      p.ffn_on_gpu ? 1.0 : (ffn_bytes > 0 ? ffn_res / ffn_bytes : 1.0);
  const double cpu_ffn_share = 1.0 - gpu_ffn_share;

  int kernels_pre = 0, kernels_post = 0;
  for (const OpCost& op : model_->DecodeLayer(layer, p.micro_batch_size, ctx)) {
    switch (op.kind) {
      case OpKind::kAttentionNorm:
      case OpKind::kQkvProjection:
        t.pre_attention_ub += GpuSeconds(op.flops, op.bytes());
        ++kernels_pre;
        break;
      case OpKind::kAttentionCore:
        if (p.attention_on_gpu) {
          // S4: attention over the GPU's KV, the CPU share swapped in first.
          t.pre_attention_ub += GpuSeconds(op.flops, op.bytes());
          ++kernels_pre;
        } else {
          // The paper's MKL GQA kernel: bound by reading the fp16 KV, or
          // by fp32 FLOPs; one operator call per micro-batch.
          t.cpu_attention_ub =
              std::max(op.bytes() / cpu_attn_bw_, op.flops / cpu_attn_flops_) +
              cpu_op;
        }
        break;
      case OpKind::kOutputProjection:
      case OpKind::kFfnNorm:
      case OpKind::kRouter:
        t.post_attention_ub += GpuSeconds(op.flops, op.bytes());
        ++kernels_post;
        break;
      case OpKind::kRoutedExperts:
      case OpKind::kDenseMlp:
      case OpKind::kSharedExpert:
        // Every micro-batch re-reads its experts from HBM (the GPU share):
        // the (N/μ)·Σ form of the digest's T_gpu.
        if (gpu_ffn_share > 0) {
          t.post_attention_ub +=
              GpuSeconds(gpu_ffn_share * op.flops, gpu_ffn_share * op.bytes());
          ++kernels_post;
        }
        if (cpu_ffn_share > 0) {
          t.cpu_ffn_ub += std::max(cpu_ffn_share * op.bytes() / cpu_mem_bw_,
                                   cpu_ffn_share * op.flops / cpu_ffn_flops_) +
                          cpu_op;
        }
        break;
      default:
        break;
    }
  }
  t.launch_pre_ub = kernels_pre * launch;
  t.launch_post_ub = kernels_post * launch;

  if (!p.attention_on_gpu) {
    t.qkv_offload_ub = mu * (q + 2 * kv) * ab / d2h_bw_ + d2h_lat;  // D1
    t.hidden_load_ub = mu * q * ab / h2d_bw_ + h2d_lat;             // D2
  } else if (p.kv_gpu_fraction < 1) {
    const double cpu_share = 1.0 - p.kv_gpu_fraction;
    t.kv_load_ub = cpu_share * mu * ctx * kv_tok / h2d_bw_ + h2d_lat;  // D4
    t.kv_offload_ub = cpu_share * mu * kv_tok / d2h_bw_ + d2h_lat;
  }
  if (cpu_ffn_share > 0) {
    t.ffn_offload_ub = mu * h * ab / d2h_bw_ + d2h_lat;
    t.ffn_load_ub = mu * h * ab / h2d_bw_ + h2d_lat;
  }

  // D3: the non-resident weights this layer computes on the GPU, in N/μ
  // pages (one per micro-batch, Algorithm 1). With F_g = 0 only the
  // attention projections stream; the host FFN share is computed in place.
  const double attn_streamed = attn_bytes - attn_res;
  const double streamed =
      p.ffn_on_gpu ? model_->layer_weight_bytes(layer) - attn_res - ffn_res
                   : attn_streamed;
  if (streamed > 0) {
    const double page = streamed / n_ub;
    t.page_load = page / h2d_bw_ + h2d_lat;
    // The attention weights go in the first pages, so PreAttn of the layer
    // waits only for those.
    t.attention_pages =
        attn_streamed > 0 ? std::min(n_ub, std::ceil(attn_streamed / page)) : 0;
    // Two hops (Appendix A.1): W_CtoPin, a CPU memcpy of the page from
    // pageable to pinned memory, before its DMA. It runs on the one CPU
    // beside the attention (t.cpu sums the two) at the machine's DRAM
    // bandwidth, a read and a write per byte: the paper's implementation
    // is PyTorch, whose CPU tensor copy is split over its intra-op thread
    // pool. One thread at the profile's per-thread figure (T4 host: 8 GB/s,
    // so 4 GB/s of copy) is ruled out by the paper's Table 5: MTBench on
    // S1, μ 36, N 504, n 128 ran at 30.12 tok/s, 504 x 128 / 30.12 = 2142
    // s in all; its prefill takes at least 222 s (210,672 padded prompt
    // tokens x 25.35 GFLOP at 24 TFLOP/s), so each of the 127 decode steps
    // took at most 15.1 s, 0.47 s a layer, while r_w < 0.1 on the T4 (0.1
    // W = 9.3 GB beside the 5.2 GB double buffer already exceeds 14.5 GB),
    // so more than 2.61 GB a layer streams: the copy ran at >= 5.5 GB/s.
    // (At 50 GB/s the T4 host copies 2.61 GB in 104 ms.) The DMA's own
    // reads of the pinned copy are not charged to the CPU, as in the
    // pinned mode.
    if (!options_.pinned_host_weights)
      t.page_stage = 2 * page / cpu_mem_bw_;  // read + write
  }

  t.gpu = n_ub * (t.pre_attention_ub + t.post_attention_ub);
  t.launch = n_ub * (t.launch_pre_ub + t.launch_post_ub);
  t.cpu = n_ub * (t.cpu_attention_ub + t.cpu_ffn_ub + t.page_stage);
  t.h2d =
      n_ub * (t.hidden_load_ub + t.kv_load_ub + t.ffn_load_ub + t.page_load);
  t.d2h = n_ub * (t.qkv_offload_ub + t.kv_offload_ub + t.ffn_offload_ub);
  // D4 (LoadKV) needs nothing from the layer before, so it is prefetched
  // off the chain.
  t.chain = t.pre_attention_ub + t.qkv_offload_ub + t.cpu_attention_ub +
            t.hidden_load_ub + t.post_attention_ub + t.ffn_offload_ub +
            t.cpu_ffn_ub + t.ffn_load_ub;
  return t;
}

double PerformanceModel::DecodeStepSeconds(const PolicyPoint& p) const {
  double step = 0;
  for (int k = 0; k < 2; ++k) {
    if (kind_count_[k] == 0) continue;
    step += static_cast<double>(kind_count_[k]) *
            DecodeLayer(kind_layer_[k], p).seconds();
  }
  return step + DecodeHeadSeconds(p);
}

double PerformanceModel::DecodeHeadSeconds(const PolicyPoint& p) const {
  // The LM head of every micro-batch: serial after the last layer (the
  // sampled tokens gate the next step).
  return static_cast<double>(p.num_micro_batches()) *
         LmHeadSeconds(p.micro_batch_size);
}

int64_t PerformanceModel::CostliestLayer(const PolicyPoint& p) const {
  if (kind_count_[0] == 0) return kind_layer_[1];
  if (kind_count_[1] == 0) return kind_layer_[0];
  return DecodeLayer(kind_layer_[0], p).seconds() >=
                 DecodeLayer(kind_layer_[1], p).seconds()
             ? kind_layer_[0]
             : kind_layer_[1];
}

double PerformanceModel::PrefillSeconds(const PolicyPoint& p,
                                        std::string* bottleneck) const {
  const ModelConfig& c = model_->config();
  const double ab = model_->options().activation_bytes_per_element;
  const double n_ub = static_cast<double>(p.num_micro_batches());
  const double seqs = static_cast<double>(p.batch_size);
  const int64_t prompt = static_cast<int64_t>(kv_prompt_len());
  const double tokens = seqs * static_cast<double>(prompt);
  const double hidden = tokens * static_cast<double>(c.hidden_size) * ab;
  const double kv_out = (p.attention_on_gpu ? 1.0 - p.kv_gpu_fraction : 1.0) *
                        tokens * model_->kv_bytes_per_token_layer();
  double total = 0, costliest = -1;
  for (int k = 0; k < 2; ++k) {
    if (kind_count_[k] == 0) continue;
    const int64_t layer = kind_layer_[k];
    double gpu = 0, kernels = 0;
    for (const OpCost& op :
         model_->PrefillLayer(layer, p.micro_batch_size, prompt)) {
      gpu += GpuSeconds(op.flops, op.bytes());
      ++kernels;
    }
    gpu *= n_ub;
    const double launch = n_ub * kernels * hw_->gpu.launch_overhead_s;
    // Prefill runs the whole layer on the GPU (§1.1 of the digest), so
    // every non-resident weight streams, once a layer (the zigzag order
    // shares it among the micro-batches), the host FFN share included.
    // Tandem parks the hidden states of all micro-batches on the host
    // between layers (they do not fit beside the weights for large N): in
    // before the layer, out after, overlapped with compute. The paper's
    // implementation keeps them on the GPU (prefill_hidden_on_gpu): only
    // the weights come in and only the KV goes out.
    double attn_res = 0, ffn_res = 0;
    SplitResident(layer, p.weights_gpu_fraction, &attn_res, &ffn_res);
    const double streamed =
        model_->layer_weight_bytes(layer) - attn_res - ffn_res;
    const double moved = options_.prefill_hidden_on_gpu ? 0.0 : hidden;
    const int copies = options_.prefill_hidden_on_gpu ? 1 : 2;
    const double h2d =
        (streamed + moved) / h2d_bw_ + copies * n_ub * hw_->link.h2d_latency_s;
    const double d2h =
        (kv_out + moved) / d2h_bw_ + copies * n_ub * hw_->link.d2h_latency_s;
    // Two hops: the CPU copies the layer's streamed weights to pinned
    // memory first (read + write, as in decode; the CPU has no attention
    // to run in prefill).
    const double stage =
        options_.pinned_host_weights ? 0.0 : 2 * streamed / cpu_mem_bw_;
    const double layer_s = std::max({gpu, launch, h2d, d2h, stage});
    const double kind_s = static_cast<double>(kind_count_[k]) * layer_s;
    total += kind_s;
    if (bottleneck != nullptr && kind_s > costliest) {
      costliest = kind_s;
      // Ties go to the GPU first, as in LayerTimes::bottleneck().
      *bottleneck = gpu >= layer_s   ? "gpu"
                    : h2d >= layer_s ? "h2d"
                    : stage >= layer_s ? "cpu"
                    : d2h >= layer_s ? "d2h"
                                     : "launch";
    }
  }
  return total + n_ub * LmHeadSeconds(p.micro_batch_size);
}

MemoryUse PerformanceModel::Memory(const PolicyPoint& p) const {
  const ModelConfig& c = model_->config();
  const double ab = model_->options().activation_bytes_per_element;
  const double wb = model_->options().weight_bytes_per_element;
  const double h = static_cast<double>(c.hidden_size);
  const double mu = static_cast<double>(p.micro_batch_size);
  const double n = static_cast<double>(p.batch_size);
  const double r_w = p.weights_gpu_fraction;
  const double logits =
      4.0 * static_cast<double>(c.vocab_size);  // fp32 per row
  MemoryUse m;
  // The LM head (the embedding matrix when tied) and the final norm stay on
  // the GPU; the embedding table stays on the host (Tandem) or, untied, on
  // the GPU as well (embedding_on_gpu).
  double head = (c.tie_word_embeddings ? model_->embedding_bytes()
                                       : model_->lm_head_bytes()) +
                h * wb;
  if (options_.embedding_on_gpu && !c.tie_word_embeddings)
    head += model_->embedding_bytes();
  m.gpu_resident_weights = r_w * layers_weight_bytes_ + head;
  m.gpu_weight_buffer = 2 * (1 - r_w) * max_layer_bytes_;
  // Decode: the residual stream of every sequence stays on the GPU between
  // PreAttn and PostAttn (only the attention output crosses PCIe); three
  // micro-batches are in flight (one in PostAttn, two ahead in attention).
  m.gpu_decode_activations = n * h * ab + 3 * ActivationBytes(mu) + mu * logits;
  // Prefill of one micro-batch of prompts: its activations, the layer's new
  // K/V before they are offloaded, and its fp32 logits (last position of
  // each prompt only, as vLLM's logits processor prunes the rest). Then
  // either the next micro-batch's hidden states prefetched from the host
  // (Tandem), or the hidden states and residuals of the whole batch, which
  // stay on the GPU between layers (the paper's, prefill_hidden_on_gpu):
  // N·s·2h·dt, e.g. 936 x 256 x 16,384 B = 3.93 GB for the paper's T4
  // synthetic-reasoning batch.
  const double t = prefill_tokens_per_micro_batch(p.micro_batch_size);
  const double batch_hidden = options_.prefill_hidden_on_gpu
                                  ? n * kv_prompt_len() * 2 * h * ab
                                  : 2 * t * h * ab;
  m.gpu_prefill_peak = ActivationBytes(t) +
                       t * model_->kv_bytes_per_token_layer() + batch_hidden +
                       mu * logits;
  const double kv_total = kv_total_bytes(p.batch_size);
  const double kv_gpu_share = p.attention_on_gpu ? p.kv_gpu_fraction : 0.0;
  m.gpu_kv = kv_gpu_share * kv_total;
  m.cpu_weights = (1 - r_w) * layers_weight_bytes_ +
                  (options_.embedding_on_gpu ? 0.0 : model_->embedding_bytes());
  m.cpu_kv = (1 - kv_gpu_share) * kv_total;
  const double prompt = kv_prompt_len();
  m.cpu_kv_prompt =
      m.cpu_kv * prompt / (prompt + static_cast<double>(workload_->gen_len));
  m.cpu_prefill_hidden =
      options_.prefill_hidden_on_gpu ? 0.0 : n * prompt * h * ab;
  if (!options_.pinned_host_weights) {
    // Three pinned pages: Algorithm 1 copies page j+2 while page j is in
    // DMA, page j+1 waiting between them (Appendix A.1's example: page 2 of
    // layer 2 goes to the GPU while page 4 is copied).
    m.cpu_staging = 3 * (1 - r_w) * max_layer_bytes_ /
                    static_cast<double>(p.num_micro_batches());
  }
  return m;
}

bool PerformanceModel::WeightsFractionRange(const PolicyPoint& p, double* lo,
                                            double* hi) const {
  PolicyPoint at = p;
  at.kv_gpu_fraction = 0;
  at.weights_gpu_fraction = 0;
  const MemoryUse m0 = Memory(at);
  at.weights_gpu_fraction = 1;
  const MemoryUse m1 = Memory(at);
  // g(r) = g0 + r·sg, c(r) = c0 + r·sc.
  const double g0 = m0.gpu(), sg = m1.gpu() - g0;
  const double c0 = m0.cpu(), sc = m1.cpu() - c0;
  double a = 0, b = 1;
  bool empty = false;
  auto bound = [&](double v0, double slope, double cap) {
    if (slope > 0) {
      b = std::min(b, (cap - v0) / slope);
    } else if (slope < 0) {
      a = std::max(a, (cap - v0) / slope);
    } else if (v0 > cap) {
      empty = true;
    }
  };
  bound(g0, sg, gpu_budget());
  bound(c0, sc, cpu_budget());
  if (empty || a > b + 1e-12 || b < 0 || a > 1) return false;
  *lo = std::clamp(a, 0.0, 1.0);
  *hi = std::clamp(b, *lo, 1.0);
  return true;
}

bool PerformanceModel::FillKvFraction(PolicyPoint* p) const {
  p->kv_gpu_fraction = 0;
  if (p->attention_on_gpu) {
    const double kv_total = kv_total_bytes(p->batch_size);
    const double left = gpu_budget() - Memory(*p).gpu();
    if (kv_total > 0 && left > 0)
      p->kv_gpu_fraction = std::min(1.0, left / kv_total);
  }
  const MemoryUse m = Memory(*p);
  return m.gpu() <= gpu_budget() * (1 + 1e-9) &&
         m.cpu() <= cpu_budget() * (1 + 1e-9);
}

Estimate PerformanceModel::Evaluate(const PolicyPoint& p) const {
  Estimate e;
  e.memory = Memory(p);
  e.fits = e.memory.gpu() <= gpu_budget() * (1 + 1e-9) &&
           e.memory.cpu() <= cpu_budget() * (1 + 1e-9);
  double costliest = -1;
  for (int k = 0; k < 2; ++k) {
    if (kind_count_[k] == 0) continue;
    LayerTimes t = DecodeLayer(kind_layer_[k], p);
    if (t.seconds() > costliest) {
      costliest = t.seconds();
      e.layer = t;
    }
  }
  e.bottleneck = e.layer.bottleneck();
  e.decode_step_s = DecodeStepSeconds(p);
  e.prefill_s = PrefillSeconds(p);
  // The paper's metric: generated tokens / (prefill + decode time).
  const double n = static_cast<double>(workload_->gen_len);
  e.throughput = static_cast<double>(p.batch_size) * n /
                 (e.prefill_s + decode_steps() * e.decode_step_s);
  return e;
}

}  // namespace tandem::planner::ml
