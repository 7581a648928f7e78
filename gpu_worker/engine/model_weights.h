// The engine's view of a checkpoint's weights, ready for the host kernels:
// linear layers in their GEMM compute dtype (in place where possible), small
// vectors (norms, biases) as f32.
#ifndef TANDEM_GPU_WORKER_ENGINE_MODEL_WEIGHTS_H_
#define TANDEM_GPU_WORKER_ENGINE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/mlp.h"
#include "gpu_worker/engine/tensor_parallel.h"

namespace tandem {

using ops::MlpWeights;

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  ops::LinearWeight q, k, v;     // [q_dim|kv_dim, hidden]
  std::vector<float> q_bias, k_bias, v_bias;  // empty unless qkv_bias
  std::vector<float> q_norm, k_norm;          // empty unless qk_norm
  ops::LinearWeight o;           // [hidden, q_dim]
  std::vector<float> o_bias;     // empty unless attn_output_bias
  std::vector<float> ffn_norm;   // [hidden]

  bool moe = false;
  MlpWeights mlp;                // dense layers (the device's part when split)
  // ScheInfer's CC part of a dense MLP: its last intermediate rows (gate
  // and up rows, down columns), computed on the CPU from host memory while
  // the device computes `mlp`, the partial outputs summed. Empty (rows()
  // == 0) unless the layer is split.
  MlpWeights mlp_cpu;
  ops::LinearWeight router;      // [experts, hidden], always f32
  std::vector<MlpWeights> experts;
  bool has_shared_expert = false;
  MlpWeights shared;
  std::vector<float> shared_gate;  // [hidden]: sigmoid(h . shared_gate) scales the shared expert
};

struct ModelWeights {
  TensorView token_embd;         // [vocab, hidden], stored dtype, in the mapping
  std::vector<float> output_norm;  // [hidden]
  ops::LinearWeight lm_head;     // [vocab, hidden] (the embeddings when tied)
  std::vector<LayerWeights> layers;
  // Copies of column slices the sharded linear weights point into (empty
  // with a single rank). Shared so that ModelWeights stays movable.
  std::shared_ptr<ShardStorage> shard_storage;

  // `prefer` is the GEMM dtype wished for; bf16 is used for bf16 checkpoints
  // on CPUs with AVX512-BF16, f32 otherwise (ops::LinearWeight::Create says
  // where 16-bit weights stay in place). With tp.size > 1, the slice of
  // every weight that rank tp.rank holds (tensor_parallel.h); q/k/v, o,
  // their biases and full q/k norms, and MLP/expert matrices are sliced,
  // everything else is whole.
  // Routed experts listed in `skip_experts` (per layer) are left empty
  // (rows() == 0): another process computes them.
  // `cpu_ffn_rows[l]` > 0 splits dense layer l's MLP: that many of its
  // last intermediate rows go to mlp_cpu (a multiple of 32 for GGUF
  // blocks, less than the intermediate size; single rank only).
  // `layout` says who reads the weights' bytes, and so whether f16 weights
  // stay in place and bf16 weights are packed (ops::WeightLayout).
  static absl::StatusOr<ModelWeights> Load(const Checkpoint& ckpt, ops::ComputeType prefer,
                                           const TensorParallel& tp = {},
                                           const std::vector<std::vector<int32_t>>& skip_experts = {},
                                           const std::vector<int64_t>& cpu_ffn_rows = {},
                                           ops::WeightLayout layout = ops::WeightLayout::kInPlace);
};

// The bytes ModelWeights::Load(ckpt, prefer, ..., kCpuPacked) would copy
// to pack matrices (ops::LinearWeight::Create): every bf16 matrix of the
// checkpoint where bf16 packs here (ops::internal::Bf16PacksHere) and
// `prefer` is not kF32, and every Q8_0, Q4_0 and Q4_1 matrix where they
// pack here (ops::internal::QuantPacksHere) and `prefer` is kQuantized. An
// upper bound: it counts the embedding table, which only a tied LM head
// packs, and every expert.
absl::StatusOr<int64_t> PackedWeightBytes(const Checkpoint& ckpt, ops::ComputeType prefer);

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_MODEL_WEIGHTS_H_
