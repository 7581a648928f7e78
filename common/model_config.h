// Architecture-independent description of a model, read from a Hugging Face
// config.json or from GGUF metadata.
#ifndef TANDEM_COMMON_MODEL_CONFIG_H_
#define TANDEM_COMMON_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem {

enum class Arch { kLlama, kQwen2, kMixtral, kQwen2Moe, kQwen3Moe, kOlmoe };

// How RoPE pairs the dimensions of a head.
enum class RopeStyle {
  kNeox,         // Hugging Face rotate-half: (x[i], x[i + d/2])
  kInterleaved,  // GGUF llama: q/k rows permuted at conversion, pairs (x[2i], x[2i+1])
};

// Normalisation of queries and keys before RoPE.
enum class QkNorm {
  kNone,
  kPerHead,  // qwen3_moe: RMSNorm over head_dim, weight [head_dim]
  kFull,     // olmoe: RMSNorm over the whole projection, weight [heads * head_dim]
};

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position = 8192;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;  // as the checkpoint names it ("llama", "qwen2_moe", ...)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position = 4096;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::kNeox;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // qwen2 family: q/k/v projections carry a bias
  bool attn_output_bias = false;  // attention_bias=true (llama, qwen3_moe, olmoe): o_proj too
  // Sliding-window attention span in tokens (mistral v0.1, qwen2 with
  // use_sliding_window); 0 = full attention. Informational: engines that do
  // not implement it must cap the context at this many tokens.
  int64_t sliding_window = 0;
  QkNorm qk_norm = QkNorm::kNone;

  // Mixture of experts (num_experts == 0 for dense models).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // qwen2_moe; 0 if none
  bool norm_topk_prob = false;                  // renormalise the top-k weights
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  bool is_moe() const { return num_experts > 0; }
  // True if `layer` uses routed experts (qwen2/3_moe may mix in dense layers).
  bool IsMoeLayer(int64_t layer) const;
  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }

  // Checks internal consistency (positive sizes, heads divide, top-k <= experts).
  // The message does not name a file; callers prefix it.
  absl::Status Validate() const;
};

std::string_view ArchName(Arch a);

// Removes eos ids outside [0, vocab_size): they can never be generated
// (transformers only warns about them). Parsers call this before Validate().
void DropUnreachableEos(ModelConfig* c);

// Parses a Hugging Face config.json. `source` names the file in errors.
// Keys absent from the file take the defaults of transformers' config class
// for the architecture. Errors: InvalidArgument for malformed or inconsistent
// values, Unimplemented for an unsupported architecture or feature (rope type,
// mlp_bias, clip_qkv, partial rotary, activation other than silu).
absl::StatusOr<ModelConfig> ModelConfigFromHfJson(const nlohmann::json& j,
                                                  const std::string& source);

}  // namespace tandem

#endif  // TANDEM_COMMON_MODEL_CONFIG_H_
