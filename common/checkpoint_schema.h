// The tensors a model needs, by canonical name and shape, as its config
// implies; and the check of a checkpoint against that list.
#ifndef TANDEM_COMMON_CHECKPOINT_SCHEMA_H_
#define TANDEM_COMMON_CHECKPOINT_SCHEMA_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/checkpoint.h"
#include "common/model_config.h"

namespace tandem {

struct ExpectedTensor {
  std::string name;            // canonical name; for experts the base ("blk.3.ffn_up_exps")
  std::vector<int64_t> shape;  // for experts, one expert's 2-D shape
  bool expert = false;         // read through ExpertTensor(name, 0..num_experts-1)
};

// Every tensor the architecture needs, in a stable order (model-level first,
// then per layer). output.weight only when embeddings are not tied.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c);

// Names a stored tensor for messages (e.g. "HF name 'model.layers.0...'"),
// given a canonical name (or expert base) and an expert index (-1 if none).
using TensorDescriber = std::function<std::string(const std::string& name, int64_t expert)>;

// Checks every expected tensor of `ckpt`: present (else the NotFound of
// Tensor()/ExpertTensor(), which names tensor and file), of the expected
// shape (else InvalidArgument naming tensor, both shapes and the file), and
// 1-D tensors (norms, biases) not block-quantized.
absl::Status ValidateCheckpointTensors(const Checkpoint& ckpt, const TensorDescriber& describe);

}  // namespace tandem

#endif  // TANDEM_COMMON_CHECKPOINT_SCHEMA_H_
