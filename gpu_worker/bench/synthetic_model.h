// Random checkpoints of a chosen shape for `tandem bench --synthetic`: a
// llama-architecture dense model or a mixtral-architecture MoE, written as a
// Hugging Face directory (f32, bf16, f16) or a GGUF file (q8_0, q4_0) so that the
// engine loads them exactly as it loads a real model. Throughput does not
// depend on the values, only on shapes and dtypes; the values are scaled so
// that activations stay finite (no NaN/Inf paths in the kernels).
//
// Safetensors are streamed tensor by tensor (a 1B bf16 model never sits in
// memory twice); GGUF files go through the test checkpoint writer, which
// holds the quantized tensors (about a byte per weight for q8_0) and the
// serialized file in memory at once.
#ifndef TANDEM_GPU_WORKER_BENCH_SYNTHETIC_MODEL_H_
#define TANDEM_GPU_WORKER_BENCH_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/model_config.h"

namespace tandem::bench {

struct SyntheticModelSpec {
  bool moe = false;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;  // dense MLP; for MoE, each expert's
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t num_experts = 0;  // MoE only
  int64_t experts_per_tok = 0;
  DType dtype = DType::kBF16;  // kF32, kBF16, kF16 (HF directory), kQ8_0, kQ4_0 (GGUF)
  uint32_t seed = 1;
};

// ~LLaMA-1B: hidden 2048, 16 layers, ffn 5632, 16/4 heads, vocab 32000.
SyntheticModelSpec DenseSpec();
// hidden 1024, 8 layers, 8 experts top-2 of ffn 2816, 16/4 heads, vocab
// 32000 (about 0.64B parameters).
SyntheticModelSpec MoeSpec();

// The model config the spec stands for (validated; InvalidArgument if not,
// e.g. heads not dividing hidden, or a quantized dtype with a row length
// that is not a multiple of 32).
absl::StatusOr<ModelConfig> SyntheticConfig(const SyntheticModelSpec& spec);

// Writes the model into the existing directory `dir` and returns the path
// to open with Checkpoint::Open (`dir` itself, or `dir`/model.gguf).
absl::StatusOr<std::string> WriteSyntheticModel(const SyntheticModelSpec& spec,
                                                const std::string& dir);

// A fresh directory under $TMPDIR (or /tmp) removed with everything in it
// when the object goes away, so that an early error return still cleans up.
class ScratchDir {
 public:
  static absl::StatusOr<ScratchDir> Create(const std::string& prefix);
  ScratchDir(ScratchDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ScratchDir& operator=(ScratchDir&& other) noexcept;
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() { Remove(); }

  const std::string& path() const { return path_; }

 private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  void Remove();
  std::string path_;
};

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_SYNTHETIC_MODEL_H_
