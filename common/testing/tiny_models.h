// Test-only synthetic models: tiny configs of every architecture, random
// weights under canonical names, and their conversion to Hugging Face and GGUF
// layouts (the same weights in both, with llama.cpp's q/k row permutation for
// GGUF llama), so that engine tests can compare formats.
#ifndef TANDEM_COMMON_TESTING_TINY_MODELS_H_
#define TANDEM_COMMON_TESTING_TINY_MODELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model_config.h"
#include "common/testing/checkpoint_writer.h"
#include "nlohmann/json.hpp"

namespace tandem::testing {

// A small valid config: hidden 64, 4 heads of 16, 2 kv heads, vocab 128,
// 2 layers (qwen2_moe: 3, layer 1 dense), dense ffn 96; MoE: 4 experts, top-2,
// expert ffn 32 (qwen2_moe: shared expert 64). llama ties its embeddings.
ModelConfig TinyConfig(Arch arch);

// config.json for `c` (model_type from c.arch_name, else ArchName(c.arch)).
nlohmann::json HfConfigJson(const ModelConfig& c);
// GGUF metadata for `c` (architecture keys, a token list of vocab_size
// strings, bos/eos ids).
GgufMetadata GgufMetadataFor(const ModelConfig& c);

// F32 weights for every tensor ExpectedTensors(c) lists, under canonical
// names; experts stacked as "<base>.weight" [E, rows, cols]. Norm weights are
// near 1, everything else in [-0.5, 0.5).
std::vector<TestTensor> MakeCanonicalTensors(const ModelConfig& c, uint32_t seed);

struct HfTensorOptions {
  DType dtype = DType::kBF16;
  bool fused_experts = false;  // transformers v5 mlp.experts.gate_up_proj / down_proj
};
std::vector<TestTensor> ToHfTensors(const ModelConfig& c, const std::vector<TestTensor>& canonical,
                                    const HfTensorOptions& options = {});

struct GgufTensorOptions {
  DType matrix_dtype = DType::kQ8_0;     // 2-D and 3-D weights
  DType embedding_dtype = DType::kQ8_0;  // token_embd.weight
  // llama.cpp permutes q/k rows of llama-arch models (RopeStyle::kInterleaved).
  bool permute_qk = true;
};
// 1-D tensors stay F32; the shared-expert gate becomes a [hidden] vector.
std::vector<TestTensor> ToGgufTensors(const ModelConfig& c,
                                      const std::vector<TestTensor>& canonical,
                                      const GgufTensorOptions& options = {});

// llama.cpp's q/k permutation of the rows of a [n_head * head_dim, cols] matrix.
std::vector<float> PermuteQkRows(const std::vector<float>& w, int64_t n_head, int64_t head_dim,
                                 int64_t cols);

// Complete model files in one call.
absl::Status WriteTinyHfModel(const std::string& dir, const ModelConfig& c, uint32_t seed,
                              const HfTensorOptions& tensor_options = {},
                              const HfDirOptions& dir_options = {});
absl::Status WriteTinyGgufModel(const std::string& path, const ModelConfig& c, uint32_t seed,
                                const GgufTensorOptions& options = {});

}  // namespace tandem::testing

#endif  // TANDEM_COMMON_TESTING_TINY_MODELS_H_
