#include "gpu_worker/engine/model_weights.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/quant.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

absl::StatusOr<std::vector<float>> LoadVector(const Checkpoint& ckpt, const std::string& name,
                                              int64_t expect) {
  TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt.Tensor(name));
  if (t.numel() != expect) {
    return absl::InvalidArgumentError(absl::StrCat(ckpt.path(), ": tensor ", name, " has ",
                                                   t.numel(), " elements, expected ", expect));
  }
  std::vector<float> v(static_cast<size_t>(expect));
  ConvertToF32(t.dtype, t.data, expect, v.data());
  return v;
}

absl::StatusOr<ops::LinearWeight> LoadLinear(const Checkpoint& ckpt, const std::string& name,
                                             ops::ComputeType prefer) {
  TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt.Tensor(name));
  return ops::LinearWeight::Create(t, prefer);
}

absl::StatusOr<LayerWeights> LoadLayer(const Checkpoint& ckpt, int64_t i,
                                       ops::ComputeType prefer) {
  const ModelConfig& c = ckpt.config();
  const std::string p = absl::StrCat("blk.", i, ".");
  LayerWeights l;
  TANDEM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(ckpt, p + "attn_norm.weight", c.hidden_size));
  TANDEM_ASSIGN_OR_RETURN(l.q, LoadLinear(ckpt, p + "attn_q.weight", prefer));
  TANDEM_ASSIGN_OR_RETURN(l.k, LoadLinear(ckpt, p + "attn_k.weight", prefer));
  TANDEM_ASSIGN_OR_RETURN(l.v, LoadLinear(ckpt, p + "attn_v.weight", prefer));
  TANDEM_ASSIGN_OR_RETURN(l.o, LoadLinear(ckpt, p + "attn_output.weight", prefer));
  if (c.qkv_bias) {
    TANDEM_ASSIGN_OR_RETURN(l.q_bias, LoadVector(ckpt, p + "attn_q.bias", c.q_dim()));
    TANDEM_ASSIGN_OR_RETURN(l.k_bias, LoadVector(ckpt, p + "attn_k.bias", c.kv_dim()));
    TANDEM_ASSIGN_OR_RETURN(l.v_bias, LoadVector(ckpt, p + "attn_v.bias", c.kv_dim()));
  }
  if (c.attn_output_bias) {
    TANDEM_ASSIGN_OR_RETURN(l.o_bias, LoadVector(ckpt, p + "attn_output.bias", c.hidden_size));
  }
  if (c.qk_norm != QkNorm::kNone) {
    const bool full = c.qk_norm == QkNorm::kFull;
    TANDEM_ASSIGN_OR_RETURN(
        l.q_norm, LoadVector(ckpt, p + "attn_q_norm.weight", full ? c.q_dim() : c.head_dim));
    TANDEM_ASSIGN_OR_RETURN(
        l.k_norm, LoadVector(ckpt, p + "attn_k_norm.weight", full ? c.kv_dim() : c.head_dim));
  }
  TANDEM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(ckpt, p + "ffn_norm.weight", c.hidden_size));

  l.moe = c.IsMoeLayer(i);
  if (!l.moe) {
    TANDEM_ASSIGN_OR_RETURN(l.mlp, ops::LoadMlp(ckpt, i, ".weight", prefer));
    return l;
  }
  // The router decides discrete routes: keep it in f32 whatever the GEMM dtype.
  TANDEM_ASSIGN_OR_RETURN(l.router,
                          LoadLinear(ckpt, p + "ffn_gate_inp.weight", ops::ComputeType::kF32));
  l.experts.reserve(static_cast<size_t>(c.num_experts));
  for (int64_t e = 0; e < c.num_experts; ++e) {
    TANDEM_ASSIGN_OR_RETURN(MlpWeights m, ops::LoadExpertMlp(ckpt, i, e, prefer));
    l.experts.push_back(std::move(m));
  }
  if (c.shared_expert_intermediate_size > 0) {
    l.has_shared_expert = true;
    TANDEM_ASSIGN_OR_RETURN(l.shared, ops::LoadMlp(ckpt, i, "_shexp.weight", prefer));
    TANDEM_ASSIGN_OR_RETURN(l.shared_gate,
                            LoadVector(ckpt, p + "ffn_gate_inp_shexp.weight", c.hidden_size));
  }
  return l;
}

}  // namespace

absl::StatusOr<ModelWeights> ModelWeights::Load(const Checkpoint& ckpt, ops::ComputeType prefer) {
  const ModelConfig& c = ckpt.config();
  ModelWeights w;
  TANDEM_ASSIGN_OR_RETURN(w.token_embd, ckpt.Tensor("token_embd.weight"));
  TANDEM_ASSIGN_OR_RETURN(w.output_norm, LoadVector(ckpt, "output_norm.weight", c.hidden_size));
  const char* head = ckpt.HasTensor("output.weight") ? "output.weight" : "token_embd.weight";
  TANDEM_ASSIGN_OR_RETURN(w.lm_head, LoadLinear(ckpt, head, prefer));
  w.layers.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    TANDEM_ASSIGN_OR_RETURN(LayerWeights l, LoadLayer(ckpt, i, prefer));
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace tandem
