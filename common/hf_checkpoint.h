// A Hugging Face checkpoint directory: config.json, model.safetensors or
// model-*.safetensors + model.safetensors.index.json, optional
// generation_config.json and tokenizer files. Tensors are exposed under the
// canonical names of checkpoint.h.
#ifndef TANDEM_COMMON_HF_CHECKPOINT_H_
#define TANDEM_COMMON_HF_CHECKPOINT_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "common/safetensors.h"
#include "nlohmann/json.hpp"

namespace tandem {

class HfCheckpoint : public Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<HfCheckpoint>> Open(const std::string& dir);

  CheckpointFormat format() const override { return CheckpointFormat::kHfDirectory; }
  const std::string& path() const override { return dir_; }
  const ModelConfig& config() const override { return config_; }
  const GenerationDefaults& generation_defaults() const override { return generation_; }
  absl::StatusOr<TensorView> Tensor(std::string_view name) const override;
  bool HasTensor(std::string_view name) const override;
  absl::StatusOr<TensorView> ExpertTensor(std::string_view base, int64_t expert) const override;
  std::string tokenizer_json_path() const override { return tokenizer_json_; }
  std::string tokenizer_config_path() const override { return tokenizer_config_; }

  // The safetensors files, in load order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  HfCheckpoint() = default;
  absl::Status LoadWeights();
  absl::Status AddTensor(const SafetensorsFile& file, const SafetensorsTensor& t);
  absl::Status AddExpert(const std::string& base, int64_t expert, TensorView v,
                         const std::string& origin);
  std::string Describe(const std::string& name, int64_t expert) const;

  std::string dir_;
  ModelConfig config_;
  GenerationDefaults generation_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView, std::less<>> tensors_;
  // Expert base ("blk.3.ffn_up_exps") -> one view per expert (data == nullptr if absent).
  std::map<std::string, std::vector<TensorView>, std::less<>> experts_;
  // Canonical name (or "base#expert") -> "'hf.name' in file", for messages.
  std::map<std::string, std::string, std::less<>> origin_;
  std::string tokenizer_json_;
  std::string tokenizer_config_;
};

// Reads generation_config.json into `out` and appends its eos ids that are
// not yet in `eos`. `source` names the file in errors.
absl::Status ParseGenerationConfig(const nlohmann::json& j, const std::string& source,
                                   GenerationDefaults* out, std::vector<int64_t>* eos);

}  // namespace tandem

#endif  // TANDEM_COMMON_HF_CHECKPOINT_H_
