// A model checkpoint, whatever its format: a Hugging Face directory
// (config.json + safetensors) or a GGUF file. Tensors are exposed under one
// naming scheme, GGUF's (llama.cpp's), which is architecture-independent:
//
//   token_embd.weight             [vocab, hidden]
//   output_norm.weight            [hidden]
//   output.weight                 [vocab, hidden]   absent when embeddings are tied
//   blk.N.attn_norm.weight        [hidden]
//   blk.N.attn_q.weight           [heads*head_dim, hidden]   (+ attn_q.bias etc.)
//   blk.N.attn_k.weight / attn_v.weight   [kv_heads*head_dim, hidden]
//   blk.N.attn_output.weight      [hidden, heads*head_dim]
//   blk.N.attn_q_norm.weight / attn_k_norm.weight   [head_dim] or full width
//   blk.N.ffn_norm.weight         [hidden]
//   blk.N.ffn_gate.weight / ffn_up.weight  [ffn, hidden];  ffn_down.weight [hidden, ffn]
//   blk.N.ffn_gate_inp.weight     [experts, hidden]  router
//   blk.N.ffn_{gate,up,down}_exps per expert through ExpertTensor()
//   blk.N.ffn_{gate,up,down}_shexp.weight, blk.N.ffn_gate_inp_shexp.weight [1, hidden]
//
// Views point into the memory mapping; nothing is copied at open. A GGUF tensor in a
// format Tandem converts (k-quants, Q5_0, Q5_1, IQ4_NL: common/converted_quant.h) is
// converted into memory the checkpoint owns when it is first asked for.
#ifndef TANDEM_COMMON_CHECKPOINT_H_
#define TANDEM_COMMON_CHECKPOINT_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/tensor.h"

namespace tandem {

class GgufFile;

enum class CheckpointFormat { kHfDirectory, kGguf };

// Default sampling settings shipped with a model (generation_config.json).
struct GenerationDefaults {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  bool do_sample = false;
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;

  // Opens a directory (Hugging Face layout) or a .gguf file. Validates the
  // config, every tensor's presence and shape against it, and the files'
  // integrity; errors name the file and the problem. Codes: NotFound for a
  // missing path, config.json, shard file or tensor; Unimplemented for an
  // unsupported architecture, dtype, GGUF version or model feature;
  // InvalidArgument for anything malformed or inconsistent. A file inside an
  // HF directory (config.json, *.safetensors) opens the directory.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& path);

  virtual CheckpointFormat format() const = 0;
  virtual const std::string& path() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const GenerationDefaults& generation_defaults() const = 0;

  // A tensor under its canonical name; NotFound naming the tensor if absent.
  virtual absl::StatusOr<TensorView> Tensor(std::string_view name) const = 0;
  virtual bool HasTensor(std::string_view name) const = 0;
  // One expert's matrix. `base` is e.g. "blk.3.ffn_up_exps"; the view is 2-D
  // ([moe_ffn, hidden] for gate/up, [hidden, moe_ffn] for down).
  virtual absl::StatusOr<TensorView> ExpertTensor(std::string_view base,
                                                  int64_t expert) const = 0;

  // What Tensor() and ExpertTensor() return (name, dtype, shape, nbytes) without
  // reading the data: `data` may be null. For checks at open, which must not make a
  // GGUF checkpoint convert its k-quant tensors and the like (it does that on first
  // use).
  virtual absl::StatusOr<TensorView> DescribeTensor(std::string_view name) const {
    return Tensor(name);
  }
  virtual absl::StatusOr<TensorView> DescribeExpertTensor(std::string_view base,
                                                          int64_t expert) const {
    return ExpertTensor(base, expert);
  }

  // What reading the tensors so far did that the user should hear of, or "": a GGUF
  // checkpoint says how many tensors it converted or mapped from the conversion cache.
  virtual std::string LoadNote() const { return ""; }

  // Tokenizer sources: an HF directory has tokenizer.json (+ _config); a GGUF
  // file carries its vocabulary in metadata (gguf() is non-null then).
  virtual std::string tokenizer_json_path() const { return ""; }
  virtual std::string tokenizer_config_path() const { return ""; }
  virtual const GgufFile* gguf() const { return nullptr; }
};

}  // namespace tandem

#endif  // TANDEM_COMMON_CHECKPOINT_H_
