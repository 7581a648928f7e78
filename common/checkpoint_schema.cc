#include "common/checkpoint_schema.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_names.h"

namespace tandem {

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  auto add = [&out](std::string name, std::vector<int64_t> shape, bool expert = false) {
    out.push_back(ExpectedTensor{std::move(name), std::move(shape), expert});
  };
  const int64_t h = c.hidden_size;
  add("token_embd.weight", {c.vocab_size, h});
  add("output_norm.weight", {h});
  if (!c.tie_word_embeddings) add("output.weight", {c.vocab_size, h});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    add(b + "attn_norm.weight", {h});
    add(b + "attn_q.weight", {c.q_dim(), h});
    add(b + "attn_k.weight", {c.kv_dim(), h});
    add(b + "attn_v.weight", {c.kv_dim(), h});
    add(b + "attn_output.weight", {h, c.q_dim()});
    if (c.qkv_bias) {
      add(b + "attn_q.bias", {c.q_dim()});
      add(b + "attn_k.bias", {c.kv_dim()});
      add(b + "attn_v.bias", {c.kv_dim()});
    }
    if (c.attn_output_bias) add(b + "attn_output.bias", {h});
    if (c.qk_norm == QkNorm::kPerHead) {
      add(b + "attn_q_norm.weight", {c.head_dim});
      add(b + "attn_k_norm.weight", {c.head_dim});
    } else if (c.qk_norm == QkNorm::kFull) {
      add(b + "attn_q_norm.weight", {c.q_dim()});
      add(b + "attn_k_norm.weight", {c.kv_dim()});
    }
    add(b + "ffn_norm.weight", {h});
    if (c.IsMoeLayer(l)) {
      const int64_t f = c.moe_intermediate_size;
      add(b + "ffn_gate_inp.weight", {c.num_experts, h});
      add(ExpertBase(l, "gate"), {f, h}, true);
      add(ExpertBase(l, "up"), {f, h}, true);
      add(ExpertBase(l, "down"), {h, f}, true);
      if (c.shared_expert_intermediate_size > 0) {
        const int64_t s = c.shared_expert_intermediate_size;
        add(b + "ffn_gate_shexp.weight", {s, h});
        add(b + "ffn_up_shexp.weight", {s, h});
        add(b + "ffn_down_shexp.weight", {h, s});
        add(b + "ffn_gate_inp_shexp.weight", {1, h});
      }
    } else {
      add(b + "ffn_gate.weight", {c.intermediate_size, h});
      add(b + "ffn_up.weight", {c.intermediate_size, h});
      add(b + "ffn_down.weight", {h, c.intermediate_size});
    }
  }
  return out;
}

namespace {

absl::Status CheckOne(const Checkpoint& ckpt, const ExpectedTensor& e, int64_t expert,
                      const TensorView& v, const TensorDescriber& describe) {
  if (v.shape == e.shape && !(v.rank() == 1 && DTypeIsQuantized(v.dtype))) {
    return absl::OkStatus();
  }
  std::string what = expert >= 0 ? absl::StrCat("expert ", expert, " of '", e.name, "'")
                                 : absl::StrCat("tensor '", e.name, "'");
  if (describe) {
    const std::string d = describe(e.name, expert);
    if (!d.empty()) absl::StrAppend(&what, " (", d, ")");
  }
  if (v.shape != e.shape) {
    return absl::InvalidArgumentError(absl::StrCat(ckpt.path(), ": ", what, " has shape ",
                                                   ShapeString(v.shape), ", expected ",
                                                   ShapeString(e.shape), " from the config"));
  }
  return absl::InvalidArgumentError(absl::StrCat(ckpt.path(), ": ", what, " is 1-D but stored as ",
                                                 std::string(DTypeName(v.dtype)),
                                                 "; norms and biases must be F32/F16/BF16"));
}

}  // namespace

absl::Status ValidateCheckpointTensors(const Checkpoint& ckpt, const TensorDescriber& describe) {
  const ModelConfig& c = ckpt.config();
  for (const ExpectedTensor& e : ExpectedTensors(c)) {
    if (e.expert) {
      for (int64_t x = 0; x < c.num_experts; ++x) {
        TANDEM_ASSIGN_OR_RETURN(TensorView v, ckpt.DescribeExpertTensor(e.name, x));
        TANDEM_RETURN_IF_ERROR(CheckOne(ckpt, e, x, v, describe));
      }
    } else {
      TANDEM_ASSIGN_OR_RETURN(TensorView v, ckpt.DescribeTensor(e.name));
      TANDEM_RETURN_IF_ERROR(CheckOne(ckpt, e, -1, v, describe));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem
