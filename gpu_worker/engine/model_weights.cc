#include "gpu_worker/engine/model_weights.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_schema.h"
#include "common/quant.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/onednn_matmul.h"
#include "cpu_worker/ops/quant_packed.h"

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

// Loads a checkpoint's weights for one tensor-parallel rank: slices are
// taken from the mapping (rows) or copied into `storage` (columns); with a
// single rank every weight is used whole, exactly as without sharding.
class ShardLoader {
 public:
  ShardLoader(const Checkpoint& ckpt, ops::ComputeType prefer, ops::WeightLayout layout,
              const TensorParallel& tp, ShardStorage& storage)
      : ckpt_(ckpt), prefer_(prefer), layout_(layout), tp_(tp), storage_(storage) {}

  bool sharded() const { return tp_.size > 1; }
  const TensorParallel& tp() const { return tp_; }

  // A replicated weight.
  absl::StatusOr<ops::LinearWeight> Whole(const std::string& name,
                                          std::optional<ops::ComputeType> prefer = {}) const {
    TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt_.Tensor(name));
    return ops::LinearWeight::Create(t, prefer.value_or(prefer_), layout_);
  }
  // Column-parallel: output rows [begin, begin + count).
  absl::StatusOr<ops::LinearWeight> Rows(const TensorView& t, int64_t begin,
                                         int64_t count) const {
    if (!sharded()) return ops::LinearWeight::Create(t, prefer_, layout_);
    TANDEM_ASSIGN_OR_RETURN(TensorView s, SliceRows(t, begin, count));
    return ops::LinearWeight::Create(s, prefer_, layout_);
  }
  // Row-parallel: input columns [begin, begin + count).
  absl::StatusOr<ops::LinearWeight> Cols(const TensorView& t, int64_t begin,
                                         int64_t count) const {
    if (!sharded()) return ops::LinearWeight::Create(t, prefer_, layout_);
    TANDEM_ASSIGN_OR_RETURN(TensorView s, SliceCols(t, begin, count, storage_));
    return ops::LinearWeight::Create(s, prefer_, layout_);
  }
  // Elements [begin, begin + count) of a vector of `expect` elements, as f32.
  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t expect,
                                            int64_t begin, int64_t count) const {
    TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt_.Tensor(name));
    if (t.numel() != expect) {
      return absl::InvalidArgumentError(absl::StrCat(ckpt_.path(), ": tensor ", name, " has ",
                                                     t.numel(), " elements, expected ", expect));
    }
    TANDEM_ASSIGN_OR_RETURN(TensorView s, SliceVector(t, begin, count));
    std::vector<float> v(static_cast<size_t>(count));
    ConvertToF32(s.dtype, s.data, count, v.data());
    return v;
  }

  // A SwiGLU MLP split along its intermediate dimension.
  absl::StatusOr<MlpWeights> Mlp(const TensorView& gate, const TensorView& up,
                                 const TensorView& down) const {
    if (gate.rank() != 2) return absl::InvalidArgumentError(absl::StrCat(gate.name, " is not a matrix"));
    const int64_t ffn = gate.dim(0);
    TANDEM_ASSIGN_OR_RETURN(const int64_t b,
                            ShardBegin(ffn, tp_, absl::StrCat(gate.name, "'s ", ffn, " rows")));
    const int64_t n = ffn / tp_.size;
    MlpWeights m;
    TANDEM_ASSIGN_OR_RETURN(m.gate, Rows(gate, b, n));
    TANDEM_ASSIGN_OR_RETURN(m.up, Rows(up, b, n));
    TANDEM_ASSIGN_OR_RETURN(m.down, Cols(down, b, n));
    if (m.up.rows() != n || m.down.cols() != n) {
      return absl::InvalidArgumentError(absl::StrCat(gate.name, ", ", up.name, " and ", down.name,
                                                     " disagree on the intermediate size"));
    }
    return m;
  }
  absl::StatusOr<MlpWeights> DenseMlp(int64_t layer, const std::string& suffix) const {
    const std::string p = absl::StrCat("blk.", layer, ".");
    TANDEM_ASSIGN_OR_RETURN(TensorView g, ckpt_.Tensor(p + "ffn_gate" + suffix));
    TANDEM_ASSIGN_OR_RETURN(TensorView u, ckpt_.Tensor(p + "ffn_up" + suffix));
    TANDEM_ASSIGN_OR_RETURN(TensorView d, ckpt_.Tensor(p + "ffn_down" + suffix));
    return Mlp(g, u, d);
  }
  // A dense MLP split along its intermediate dimension at `device_rows`:
  // rows [0, device_rows) for the device, the rest for the CPU.
  absl::StatusOr<std::pair<MlpWeights, MlpWeights>> SplitDenseMlp(int64_t layer,
                                                                  int64_t cpu_rows) const {
    const std::string p = absl::StrCat("blk.", layer, ".");
    TANDEM_ASSIGN_OR_RETURN(TensorView g, ckpt_.Tensor(p + "ffn_gate.weight"));
    TANDEM_ASSIGN_OR_RETURN(TensorView u, ckpt_.Tensor(p + "ffn_up.weight"));
    TANDEM_ASSIGN_OR_RETURN(TensorView d, ckpt_.Tensor(p + "ffn_down.weight"));
    const int64_t ffn = g.rank() == 2 ? g.dim(0) : 0;
    if (sharded() || cpu_rows <= 0 || cpu_rows >= ffn) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", layer, ": ", cpu_rows, " of ", ffn, " MLP rows on the CPU (0 < rows < ",
          ffn, ", one rank)"));
    }
    const int64_t n = ffn - cpu_rows;
    auto part = [&](int64_t begin, int64_t count) -> absl::StatusOr<MlpWeights> {
      MlpWeights m;
      TANDEM_ASSIGN_OR_RETURN(TensorView gs, SliceRows(g, begin, count));
      TANDEM_ASSIGN_OR_RETURN(TensorView us, SliceRows(u, begin, count));
      TANDEM_ASSIGN_OR_RETURN(TensorView ds, SliceCols(d, begin, count, storage_));
      TANDEM_ASSIGN_OR_RETURN(m.gate, ops::LinearWeight::Create(gs, prefer_, layout_));
      TANDEM_ASSIGN_OR_RETURN(m.up, ops::LinearWeight::Create(us, prefer_, layout_));
      TANDEM_ASSIGN_OR_RETURN(m.down, ops::LinearWeight::Create(ds, prefer_, layout_));
      return m;
    };
    TANDEM_ASSIGN_OR_RETURN(MlpWeights device, part(0, n));
    TANDEM_ASSIGN_OR_RETURN(MlpWeights cpu, part(n, cpu_rows));
    return std::make_pair(std::move(device), std::move(cpu));
  }
  absl::StatusOr<MlpWeights> ExpertMlp(int64_t layer, int64_t expert) const {
    const std::string p = absl::StrCat("blk.", layer, ".");
    TANDEM_ASSIGN_OR_RETURN(TensorView g, ckpt_.ExpertTensor(p + "ffn_gate_exps", expert));
    TANDEM_ASSIGN_OR_RETURN(TensorView u, ckpt_.ExpertTensor(p + "ffn_up_exps", expert));
    TANDEM_ASSIGN_OR_RETURN(TensorView d, ckpt_.ExpertTensor(p + "ffn_down_exps", expert));
    return Mlp(g, u, d);
  }

  const Checkpoint& ckpt() const { return ckpt_; }

 private:
  const Checkpoint& ckpt_;
  ops::ComputeType prefer_;
  ops::WeightLayout layout_;
  TensorParallel tp_;
  ShardStorage& storage_;
};

absl::StatusOr<LayerWeights> LoadLayer(const ShardLoader& ld, int64_t i,
                                       const std::vector<int32_t>& skip, int64_t cpu_ffn_rows) {
  const Checkpoint& ckpt = ld.ckpt();
  const ModelConfig& c = ckpt.config();
  const AttentionShard a = ShardAttention(c, ld.tp());
  const int64_t hd = c.head_dim;
  const int64_t q0 = a.head_begin * hd, qn = a.heads * hd;
  const int64_t kv0 = a.kv_head_begin * hd, kvn = a.kv_heads * hd;
  const std::string p = absl::StrCat("blk.", i, ".");
  LayerWeights l;
  TANDEM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(ckpt, p + "attn_norm.weight", c.hidden_size));
  TANDEM_ASSIGN_OR_RETURN(TensorView q, ckpt.Tensor(p + "attn_q.weight"));
  TANDEM_ASSIGN_OR_RETURN(TensorView k, ckpt.Tensor(p + "attn_k.weight"));
  TANDEM_ASSIGN_OR_RETURN(TensorView v, ckpt.Tensor(p + "attn_v.weight"));
  TANDEM_ASSIGN_OR_RETURN(TensorView o, ckpt.Tensor(p + "attn_output.weight"));
  TANDEM_ASSIGN_OR_RETURN(l.q, ld.Rows(q, q0, qn));
  TANDEM_ASSIGN_OR_RETURN(l.k, ld.Rows(k, kv0, kvn));
  TANDEM_ASSIGN_OR_RETURN(l.v, ld.Rows(v, kv0, kvn));
  TANDEM_ASSIGN_OR_RETURN(l.o, ld.Cols(o, q0, qn));
  if (c.qkv_bias) {
    TANDEM_ASSIGN_OR_RETURN(l.q_bias, ld.Vector(p + "attn_q.bias", c.q_dim(), q0, qn));
    TANDEM_ASSIGN_OR_RETURN(l.k_bias, ld.Vector(p + "attn_k.bias", c.kv_dim(), kv0, kvn));
    TANDEM_ASSIGN_OR_RETURN(l.v_bias, ld.Vector(p + "attn_v.bias", c.kv_dim(), kv0, kvn));
  }
  if (c.attn_output_bias) {
    TANDEM_ASSIGN_OR_RETURN(l.o_bias, LoadVector(ckpt, p + "attn_output.bias", c.hidden_size));
  }
  if (c.qk_norm == QkNorm::kPerHead) {
    TANDEM_ASSIGN_OR_RETURN(l.q_norm, LoadVector(ckpt, p + "attn_q_norm.weight", hd));
    TANDEM_ASSIGN_OR_RETURN(l.k_norm, LoadVector(ckpt, p + "attn_k_norm.weight", hd));
  } else if (c.qk_norm == QkNorm::kFull) {
    TANDEM_ASSIGN_OR_RETURN(l.q_norm, ld.Vector(p + "attn_q_norm.weight", c.q_dim(), q0, qn));
    TANDEM_ASSIGN_OR_RETURN(l.k_norm,
                            ld.Vector(p + "attn_k_norm.weight", c.kv_dim(), kv0, kvn));
  }
  TANDEM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(ckpt, p + "ffn_norm.weight", c.hidden_size));

  l.moe = c.IsMoeLayer(i);
  if (!l.moe && cpu_ffn_rows > 0) {
    TANDEM_ASSIGN_OR_RETURN(auto parts, ld.SplitDenseMlp(i, cpu_ffn_rows));
    l.mlp = std::move(parts.first);
    l.mlp_cpu = std::move(parts.second);
    return l;
  }
  if (!l.moe) {
    TANDEM_ASSIGN_OR_RETURN(l.mlp, ld.DenseMlp(i, ".weight"));
    return l;
  }
  if (cpu_ffn_rows > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", i, " is a mixture of experts: its experts go to the CPU whole, not in rows"));
  }
  // The router decides discrete routes: keep it in f32 whatever the GEMM
  // dtype, and whole on every rank so that every rank routes alike.
  TANDEM_ASSIGN_OR_RETURN(l.router, ld.Whole(p + "ffn_gate_inp.weight", ops::ComputeType::kF32));
  l.experts.reserve(static_cast<size_t>(c.num_experts));
  for (int64_t e = 0; e < c.num_experts; ++e) {
    if (std::find(skip.begin(), skip.end(), e) != skip.end()) {
      l.experts.emplace_back();  // computed elsewhere: nothing loaded
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(MlpWeights m, ld.ExpertMlp(i, e));
    l.experts.push_back(std::move(m));
  }
  if (c.shared_expert_intermediate_size > 0) {
    l.has_shared_expert = true;
    TANDEM_ASSIGN_OR_RETURN(l.shared, ld.DenseMlp(i, "_shexp.weight"));
    TANDEM_ASSIGN_OR_RETURN(l.shared_gate,
                            LoadVector(ckpt, p + "ffn_gate_inp_shexp.weight", c.hidden_size));
  }
  return l;
}

}  // namespace

absl::StatusOr<ModelWeights> ModelWeights::Load(const Checkpoint& ckpt, ops::ComputeType prefer,
                                               const TensorParallel& tp,
                                               const std::vector<std::vector<int32_t>>& skip_experts,
                                               const std::vector<int64_t>& cpu_ffn_rows,
                                               ops::WeightLayout layout) {
  const ModelConfig& c = ckpt.config();
  TANDEM_RETURN_IF_ERROR(CheckTensorParallel(c, tp));
  ModelWeights w;
  w.shard_storage = std::make_shared<ShardStorage>();
  const ShardLoader loader(ckpt, prefer, layout, tp, *w.shard_storage);
  TANDEM_ASSIGN_OR_RETURN(w.token_embd, ckpt.Tensor("token_embd.weight"));
  TANDEM_ASSIGN_OR_RETURN(w.output_norm, LoadVector(ckpt, "output_norm.weight", c.hidden_size));
  const char* head = ckpt.HasTensor("output.weight") ? "output.weight" : "token_embd.weight";
  TANDEM_ASSIGN_OR_RETURN(w.lm_head, loader.Whole(head));
  w.layers.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    static const std::vector<int32_t> kNone;
    const std::vector<int32_t>& skip =
        static_cast<size_t>(i) < skip_experts.size() ? skip_experts[static_cast<size_t>(i)] : kNone;
    const int64_t cc =
        static_cast<size_t>(i) < cpu_ffn_rows.size() ? cpu_ffn_rows[static_cast<size_t>(i)] : 0;
    if (cc < 0) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, ": ", cc, " MLP rows on the CPU"));
    }
    TANDEM_ASSIGN_OR_RETURN(LayerWeights l, LoadLayer(loader, i, skip, cc));
    w.layers.push_back(std::move(l));
  }
  return w;
}

absl::StatusOr<int64_t> PackedWeightBytes(const Checkpoint& ckpt, ops::ComputeType prefer) {
  const bool bf16 = prefer != ops::ComputeType::kF32 && ops::internal::Bf16PacksHere();
  const bool quant = prefer == ops::ComputeType::kQuantized && ops::internal::QuantPacksHere();
  if (!bf16 && !quant) return 0;
  const ModelConfig& c = ckpt.config();
  int64_t bytes = 0;
  for (const ExpectedTensor& e : ExpectedTensors(c)) {
    const int64_t copies = e.expert ? c.num_experts : 1;
    for (int64_t x = 0; x < copies; ++x) {
      TANDEM_ASSIGN_OR_RETURN(TensorView v,
                              e.expert ? ckpt.ExpertTensor(e.name, x) : ckpt.Tensor(e.name));
      if (v.rank() != 2) continue;
      if (bf16 && v.dtype == DType::kBF16) {
        bytes += ops::internal::PackedBf16Bytes(v.dim(0), v.dim(1));
      } else if (quant && ops::internal::PacksAsQuant(v.dtype)) {
        bytes += ops::internal::PackedQuantBytes(v.dtype, v.dim(0), v.dim(1));
      }
    }
  }
  return bytes;
}

}  // namespace tandem
