// A GGUF file as a Checkpoint: config from metadata, tensors already under
// canonical names, MoE experts stacked in 3-D tensors [E, rows, cols].
#ifndef TANDEM_COMMON_GGUF_CHECKPOINT_H_
#define TANDEM_COMMON_GGUF_CHECKPOINT_H_

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint.h"
#include "common/converted_cache.h"
#include "common/gguf.h"

namespace tandem {

// Builds a ModelConfig from GGUF metadata (general.architecture "llama" —
// Mixtral when llama.expert_count > 0 —, "qwen2", "qwen2moe", "qwen3moe",
// "olmoe"). Tensor presence decides tied embeddings, llama biases and the
// dense layers of qwen MoE models. Errors name the file.
absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& f);

class GgufCheckpoint : public Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<GgufCheckpoint>> Open(const std::string& path);

  CheckpointFormat format() const override { return CheckpointFormat::kGguf; }
  const std::string& path() const override { return file_->path(); }
  const ModelConfig& config() const override { return config_; }
  const GenerationDefaults& generation_defaults() const override { return generation_; }
  absl::StatusOr<TensorView> Tensor(std::string_view name) const override;
  bool HasTensor(std::string_view name) const override;
  // Slices the 3-D blk.N.ffn_*_exps.weight tensor; falls back to the legacy
  // per-expert layout blk.N.ffn_{gate,up,down}.E.weight.
  absl::StatusOr<TensorView> ExpertTensor(std::string_view base, int64_t expert) const override;
  absl::StatusOr<TensorView> DescribeTensor(std::string_view name) const override;
  absl::StatusOr<TensorView> DescribeExpertTensor(std::string_view base,
                                                  int64_t expert) const override;
  const GgufFile* gguf() const override { return file_.get(); }
  std::string LoadNote() const override;

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  GgufCheckpoint() = default;
  absl::Status CheckExpertStacks() const;
  absl::StatusOr<TensorView> TensorImpl(std::string_view name, bool with_data) const;
  absl::StatusOr<TensorView> ExpertTensorImpl(std::string_view base, int64_t expert,
                                              bool with_data) const;
  // The tensor's bytes in its compute dtype: the mapping, or for a converted type its
  // conversion, made on the first call (or found in the on-disk cache) and kept for the
  // checkpoint's life.
  absl::StatusOr<const void*> Data(const GgufTensorInfo& info) const;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  GenerationDefaults generation_;
  // A converted tensor: mapped from the on-disk cache, or in process memory where the
  // cache is off or could not store it.
  struct Converted {
    std::unique_ptr<MappedFile> mapped;
    std::unique_ptr<uint8_t, FreeDeleter> heap;
    const void* data = nullptr;
  };

  // What the conversions did, for LoadNote().
  struct ConversionStats {
    std::map<std::string, int> made;  // by source type name, e.g. "Q4_K"
    int mapped = 0;                   // found in the cache
    int64_t bytes = 0;                // of converted data, made or mapped
    double seconds = 0;               // converting and storing
    bool in_memory = false;           // some stayed in process memory
  };

  std::unique_ptr<ConvertedCache> cache_;  // null: off, or no file holds a converted type
  std::string no_cache_reason_;
  mutable absl::Mutex mu_;
  mutable std::map<std::string, Converted, std::less<>> converted_ ABSL_GUARDED_BY(mu_);
  mutable ConversionStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem

#endif  // TANDEM_COMMON_GGUF_CHECKPOINT_H_
