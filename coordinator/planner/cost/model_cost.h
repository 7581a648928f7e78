// FLOPs and bytes of every operation of a layer, from the model config alone
// (MoE-Lightning's HRM numerators: theoretical, not fitted). Dense and MoE
// layers, grouped-query attention, shared experts; prefill and decode.
//
// Conventions: a matrix multiply of m rows by a [n, k] weight is 2·m·n·k
// FLOPs and reads n·k weight elements once per call (the weight is shared by
// the rows of one call); SwiGLU MLPs are three matrices (gate, up, down);
// attention core FLOPs are QK and PV: 4 · keys · q_heads · head_dim per
// query. KV bytes are K and V of one position of one layer.
#ifndef TANDEM_COORDINATOR_PLANNER_COST_MODEL_COST_H_
#define TANDEM_COORDINATOR_PLANNER_COST_MODEL_COST_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"

namespace tandem::planner {

struct CostOptions {
  double weight_bytes_per_element = 2;      // bf16/fp16 weights
  double kv_bytes_per_element = 2;          // fp16 KV
  double activation_bytes_per_element = 2;  // hidden states moved between devices
};

enum class OpKind {
  kEmbedding,
  kAttentionNorm,
  kQkvProjection,
  kAttentionCore,  // QK^T, softmax, PV over the cached keys
  kOutputProjection,
  kFfnNorm,
  kRouter,         // gate logits + softmax/top-k
  kDenseMlp,       // dense layers' SwiGLU MLP
  kRoutedExperts,  // the experts the tokens route to (expected distinct ones)
  kSharedExpert,   // qwen2_moe's always-on expert
  kFinalNorm,
  kLmHead,
};
std::string_view OpKindName(OpKind k);

// One operation of one step over a batch.
struct OpCost {
  OpKind kind = OpKind::kQkvProjection;
  double flops = 0;
  double weight_bytes = 0;      // distinct weight bytes the op reads
  double kv_read_bytes = 0;     // attention: cached K and V read
  double kv_write_bytes = 0;    // attention: new K and V appended
  double activation_bytes = 0;  // inputs read + outputs written (hidden states)
  double bytes() const { return weight_bytes + kv_read_bytes + kv_write_bytes + activation_bytes; }
  double intensity() const { return bytes() > 0 ? flops / bytes() : 0; }
};

class ModelCost {
 public:
  static absl::StatusOr<ModelCost> Create(const ModelConfig& config, CostOptions options = {});

  const ModelConfig& config() const { return config_; }
  const CostOptions& options() const { return options_; }

  // --- Sizes (bytes at options().weight_bytes_per_element) ---
  int64_t total_params() const;
  double total_weight_bytes() const;
  double embedding_bytes() const;
  double lm_head_bytes() const;  // 0 extra when tied (counted in embedding_bytes)
  // QKV + O projections (+ biases, q/k norms) of one layer.
  double attention_weight_bytes() const;
  // The layer's whole FFN: dense MLP, or router + every routed expert + the
  // shared expert.
  double ffn_weight_bytes(int64_t layer) const;
  double layer_weight_bytes(int64_t layer) const;  // attention + FFN + norms
  double expert_bytes() const;         // one routed expert (gate + up + down)
  double shared_expert_bytes() const;  // 0 if none
  double router_bytes() const;
  double dense_mlp_bytes() const;      // one dense layer's MLP (0 if the model has none)
  // K and V of one token in one layer.
  double kv_bytes_per_token_layer() const;
  double kv_bytes_per_token() const;  // all layers

  // --- FLOPs per token ---
  double attention_projection_flops_per_token() const;  // QKV + O
  double attention_core_flops_per_key() const;          // QK + PV for one key, all heads
  double expert_flops_per_token() const;                // one routed expert
  double dense_mlp_flops_per_token() const;
  double shared_expert_flops_per_token() const;

  // Expected distinct routed experts of one layer when `tokens` tokens each
  // pick k of E uniformly: E · (1 − (1 − k/E)^tokens).
  double ExpectedActiveExperts(double tokens) const;

  // The operations of layer `layer` for one decode step of `batch`
  // sequences, each attending over `context` cached keys (its own included).
  std::vector<OpCost> DecodeLayer(int64_t layer, int64_t batch, double context) const;
  // The operations of layer `layer` for the prefill of `sequences` prompts
  // of `prompt_len` tokens each in one step (causal: query i attends i+1 keys).
  std::vector<OpCost> PrefillLayer(int64_t layer, int64_t sequences, int64_t prompt_len) const;
  // Embedding lookup, final norm and LM head for `tokens` tokens of which
  // `logit_rows` need logits.
  std::vector<OpCost> HeadAndTail(int64_t tokens, int64_t logit_rows) const;

  // Sums of a list of ops.
  static OpCost Sum(const std::vector<OpCost>& ops);

  // Bytes of activations and scratch a step of `tokens` tokens keeps live:
  // `copies` sets of four hidden-size vectors and two of the widest
  // intermediate (MLP, routed experts or q/k/v) per token at
  // `bytes_per_element`, plus fp32 logits of `logit_rows` rows. Layers reuse
  // one layer's buffers, so the depth does not enter.
  double StepActivationBytes(double tokens, double logit_rows, double copies,
                             double bytes_per_element) const;

 private:
  ModelCost(const ModelConfig& c, CostOptions o) : config_(c), options_(o) {}
  std::vector<OpCost> LayerOps(int64_t layer, double tokens, double attention_keys_total,
                               double kv_read_tokens, double kv_write_tokens) const;

  ModelConfig config_;
  CostOptions options_;
};

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_COST_MODEL_COST_H_
