#include "coordinator/planner/cost/model_cost.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::planner {

std::string_view OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kAttentionNorm: return "attention_norm";
    case OpKind::kQkvProjection: return "qkv_projection";
    case OpKind::kAttentionCore: return "attention";
    case OpKind::kOutputProjection: return "output_projection";
    case OpKind::kFfnNorm: return "ffn_norm";
    case OpKind::kRouter: return "router";
    case OpKind::kDenseMlp: return "dense_mlp";
    case OpKind::kRoutedExperts: return "routed_experts";
    case OpKind::kSharedExpert: return "shared_expert";
    case OpKind::kFinalNorm: return "final_norm";
    case OpKind::kLmHead: return "lm_head";
  }
  return "unknown";
}

absl::StatusOr<ModelCost> ModelCost::Create(const ModelConfig& config, CostOptions options) {
  TANDEM_RETURN_IF_ERROR(config.Validate());
  if (!(options.weight_bytes_per_element > 0) || !(options.kv_bytes_per_element > 0) ||
      !(options.activation_bytes_per_element > 0)) {
    return absl::InvalidArgumentError("cost options: bytes per element must be positive");
  }
  return ModelCost(config, options);
}

namespace {

// Parameters of the pieces of one layer (elements, not bytes).
struct LayerParams {
  double attention = 0;  // QKV + O (+ biases, q/k norms)
  double norms = 0;      // the two RMSNorm weights
  double dense_mlp = 0;
  double router = 0;
  double expert = 0;     // one routed expert
  double shared = 0;     // shared expert + its gate
};

LayerParams ParamsOf(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.q_dim()), kv = static_cast<double>(c.kv_dim());
  LayerParams p;
  p.attention = h * (q + 2 * kv) + q * h;
  if (c.qkv_bias) p.attention += q + 2 * kv;
  if (c.attn_output_bias) p.attention += h;
  if (c.qk_norm == QkNorm::kPerHead) p.attention += 2.0 * static_cast<double>(c.head_dim);
  if (c.qk_norm == QkNorm::kFull) p.attention += q + kv;
  p.norms = 2 * h;
  p.dense_mlp = 3 * h * static_cast<double>(c.intermediate_size);
  if (c.is_moe()) {
    p.router = static_cast<double>(c.num_experts) * h;
    p.expert = 3 * h * static_cast<double>(c.moe_intermediate_size);
    if (c.shared_expert_intermediate_size > 0) {
      // qwen2_moe: a SwiGLU expert plus a one-output sigmoid gate.
      p.shared = 3 * h * static_cast<double>(c.shared_expert_intermediate_size) + h;
    }
  }
  return p;
}

}  // namespace

int64_t ModelCost::total_params() const {
  const LayerParams p = ParamsOf(config_);
  const double h = static_cast<double>(config_.hidden_size);
  const double embed = static_cast<double>(config_.vocab_size) * h;
  double total = embed + (config_.tie_word_embeddings ? 0 : embed) + h;  // + final norm
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    total += p.attention + p.norms;
    if (config_.IsMoeLayer(l)) {
      total += p.router + p.expert * static_cast<double>(config_.num_experts) + p.shared;
    } else {
      total += p.dense_mlp;
    }
  }
  return static_cast<int64_t>(std::llround(total));
}

double ModelCost::StepActivationBytes(double tokens, double logit_rows, double copies,
                                      double bytes_per_element) const {
  const ModelConfig& c = config_;
  const double widest = static_cast<double>(
      std::max({c.intermediate_size, c.moe_intermediate_size * c.num_experts_per_tok,
                c.q_dim() + 2 * c.kv_dim()}));
  return copies * tokens * (4.0 * static_cast<double>(c.hidden_size) + 2 * widest) *
             bytes_per_element +
         logit_rows * static_cast<double>(c.vocab_size) * 4;
}

double ModelCost::total_weight_bytes() const {
  return static_cast<double>(total_params()) * options_.weight_bytes_per_element;
}

double ModelCost::embedding_bytes() const {
  return static_cast<double>(config_.vocab_size * config_.hidden_size) *
         options_.weight_bytes_per_element;
}

double ModelCost::lm_head_bytes() const {
  return config_.tie_word_embeddings ? 0 : embedding_bytes();
}

double ModelCost::attention_weight_bytes() const {
  return ParamsOf(config_).attention * options_.weight_bytes_per_element;
}

double ModelCost::ffn_weight_bytes(int64_t layer) const {
  const LayerParams p = ParamsOf(config_);
  const double params = config_.IsMoeLayer(layer)
                            ? p.router + p.expert * static_cast<double>(config_.num_experts) + p.shared
                            : p.dense_mlp;
  return params * options_.weight_bytes_per_element;
}

double ModelCost::layer_weight_bytes(int64_t layer) const {
  return attention_weight_bytes() + ffn_weight_bytes(layer) +
         ParamsOf(config_).norms * options_.weight_bytes_per_element;
}

double ModelCost::expert_bytes() const {
  return ParamsOf(config_).expert * options_.weight_bytes_per_element;
}
double ModelCost::shared_expert_bytes() const {
  return ParamsOf(config_).shared * options_.weight_bytes_per_element;
}
double ModelCost::router_bytes() const {
  return ParamsOf(config_).router * options_.weight_bytes_per_element;
}
double ModelCost::dense_mlp_bytes() const {
  bool any_dense = false;
  for (int64_t l = 0; l < config_.num_layers && !any_dense; ++l) any_dense = !config_.IsMoeLayer(l);
  return any_dense ? ParamsOf(config_).dense_mlp * options_.weight_bytes_per_element : 0;
}

double ModelCost::kv_bytes_per_token_layer() const {
  return 2.0 * static_cast<double>(config_.kv_dim()) * options_.kv_bytes_per_element;
}
double ModelCost::kv_bytes_per_token() const {
  return kv_bytes_per_token_layer() * static_cast<double>(config_.num_layers);
}

double ModelCost::attention_projection_flops_per_token() const {
  const double h = static_cast<double>(config_.hidden_size);
  const double q = static_cast<double>(config_.q_dim()), kv = static_cast<double>(config_.kv_dim());
  return 2 * h * (q + 2 * kv) + 2 * q * h;
}
double ModelCost::attention_core_flops_per_key() const {
  // QK^T: 2·head_dim per (query head, key); PV: the same again.
  return 4.0 * static_cast<double>(config_.q_dim());
}
double ModelCost::expert_flops_per_token() const { return 2 * ParamsOf(config_).expert; }
double ModelCost::dense_mlp_flops_per_token() const { return 2 * ParamsOf(config_).dense_mlp; }
double ModelCost::shared_expert_flops_per_token() const { return 2 * ParamsOf(config_).shared; }

double ModelCost::ExpectedActiveExperts(double tokens) const {
  if (!config_.is_moe() || tokens <= 0) return 0;
  const double e = static_cast<double>(config_.num_experts);
  const double k = static_cast<double>(config_.num_experts_per_tok);
  return e * (1.0 - std::pow(1.0 - k / e, tokens));
}

std::vector<OpCost> ModelCost::LayerOps(int64_t layer, double tokens, double attention_keys_total,
                                        double kv_read_tokens, double kv_write_tokens) const {
  const ModelConfig& c = config_;
  const double wb = options_.weight_bytes_per_element, ab = options_.activation_bytes_per_element;
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.q_dim()), kv = static_cast<double>(c.kv_dim());
  const LayerParams p = ParamsOf(c);
  std::vector<OpCost> ops;
  auto norm = [&](OpKind kind) {
    OpCost o{.kind = kind};
    o.flops = 4 * tokens * h;  // square, sum, scale, multiply
    o.weight_bytes = h * wb;
    o.activation_bytes = 2 * tokens * h * ab;
    return o;
  };
  ops.push_back(norm(OpKind::kAttentionNorm));
  {
    OpCost o{.kind = OpKind::kQkvProjection};
    o.flops = 2 * tokens * h * (q + 2 * kv);
    o.weight_bytes = (p.attention - q * h) * wb;  // everything but O
    o.activation_bytes = tokens * (h + q + 2 * kv) * ab;
    ops.push_back(o);
  }
  {
    OpCost o{.kind = OpKind::kAttentionCore};
    o.flops = attention_core_flops_per_key() * attention_keys_total;
    o.kv_read_bytes = kv_read_tokens * kv_bytes_per_token_layer();
    o.kv_write_bytes = kv_write_tokens * kv_bytes_per_token_layer();
    o.activation_bytes = 2 * tokens * q * ab;  // q in, context out
    ops.push_back(o);
  }
  {
    OpCost o{.kind = OpKind::kOutputProjection};
    o.flops = 2 * tokens * q * h;
    o.weight_bytes = q * h * wb;
    o.activation_bytes = tokens * (q + h) * ab;
    ops.push_back(o);
  }
  ops.push_back(norm(OpKind::kFfnNorm));
  if (c.IsMoeLayer(layer)) {
    const double e = static_cast<double>(c.num_experts), k = static_cast<double>(c.num_experts_per_tok);
    OpCost r{.kind = OpKind::kRouter};
    r.flops = 2 * tokens * h * e;
    r.weight_bytes = p.router * wb;
    r.activation_bytes = tokens * h * ab;
    ops.push_back(r);
    OpCost x{.kind = OpKind::kRoutedExperts};
    x.flops = tokens * k * expert_flops_per_token();
    x.weight_bytes = ExpectedActiveExperts(tokens) * p.expert * wb;
    x.activation_bytes = 2 * tokens * k * h * ab;  // each routed copy in and out
    ops.push_back(x);
    if (p.shared > 0) {
      OpCost s{.kind = OpKind::kSharedExpert};
      s.flops = tokens * shared_expert_flops_per_token();
      s.weight_bytes = p.shared * wb;
      s.activation_bytes = 2 * tokens * h * ab;
      ops.push_back(s);
    }
  } else {
    OpCost m{.kind = OpKind::kDenseMlp};
    m.flops = tokens * dense_mlp_flops_per_token();
    m.weight_bytes = p.dense_mlp * wb;
    m.activation_bytes = 2 * tokens * h * ab;
    ops.push_back(m);
  }
  return ops;
}

std::vector<OpCost> ModelCost::DecodeLayer(int64_t layer, int64_t batch, double context) const {
  const double b = static_cast<double>(batch);
  return LayerOps(layer, b, b * context, b * context, b);
}

std::vector<OpCost> ModelCost::PrefillLayer(int64_t layer, int64_t sequences,
                                            int64_t prompt_len) const {
  const double s = static_cast<double>(sequences), n = static_cast<double>(prompt_len);
  // Causal: query i sees i + 1 keys, n(n+1)/2 in all. A tiled kernel keeps
  // the freshly computed K/V on chip, so it reads them about once.
  return LayerOps(layer, s * n, s * n * (n + 1) / 2, s * n, s * n);
}

std::vector<OpCost> ModelCost::HeadAndTail(int64_t tokens, int64_t logit_rows) const {
  const double wb = options_.weight_bytes_per_element, ab = options_.activation_bytes_per_element;
  const double h = static_cast<double>(config_.hidden_size);
  const double v = static_cast<double>(config_.vocab_size);
  const double t = static_cast<double>(tokens), r = static_cast<double>(logit_rows);
  OpCost e{.kind = OpKind::kEmbedding};
  e.weight_bytes = t * h * wb;  // one row per token
  e.activation_bytes = t * h * ab;
  OpCost n{.kind = OpKind::kFinalNorm};
  n.flops = 4 * r * h;
  n.weight_bytes = h * wb;
  n.activation_bytes = 2 * r * h * ab;
  OpCost head{.kind = OpKind::kLmHead};
  head.flops = 2 * r * h * v;
  head.weight_bytes = v * h * wb;
  head.activation_bytes = r * (h + v) * ab;
  return {e, n, head};
}

OpCost ModelCost::Sum(const std::vector<OpCost>& ops) {
  OpCost s;
  for (const OpCost& o : ops) {
    s.flops += o.flops;
    s.weight_bytes += o.weight_bytes;
    s.kv_read_bytes += o.kv_read_bytes;
    s.kv_write_bytes += o.kv_write_bytes;
    s.activation_bytes += o.activation_bytes;
  }
  return s;
}

}  // namespace tandem::planner
