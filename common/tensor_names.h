// Hugging Face tensor names <-> Tandem's canonical (GGUF-style) names, per
// architecture. See checkpoint.h for the canonical scheme.
#ifndef TANDEM_COMMON_TENSOR_NAMES_H_
#define TANDEM_COMMON_TENSOR_NAMES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/model_config.h"

namespace tandem {

// Where an HF tensor goes.
struct HfTensorRef {
  enum class Kind {
    kPlain,        // `canonical` is the full canonical name
    kExpert,       // one expert's matrix: `canonical` is the base ("blk.3.ffn_up_exps")
    kFusedGateUp,  // transformers v5 mlp.experts.gate_up_proj [E, 2*ff, hidden]
    kFusedDown,    // transformers v5 mlp.experts.down_proj [E, hidden, ff]
  };
  Kind kind = Kind::kPlain;
  std::string canonical;
  int64_t layer = -1;   // -1 for model-level tensors
  int64_t expert = -1;  // kExpert only
};

// Maps an HF name for `arch`; nullopt for names Tandem does not use (e.g.
// rotary_emb.inv_freq) or that do not belong to the architecture.
std::optional<HfTensorRef> MapHfTensorName(Arch arch, std::string_view hf_name);

// The HF name a canonical tensor is stored under (the per-expert form for
// expert bases when `expert` >= 0); "" if the name is not canonical. Used in
// error messages and by the test checkpoint writer.
std::string HfNameForCanonical(Arch arch, std::string_view canonical, int64_t expert = -1);

// "blk.N.ffn_{gate,up,down}_exps" for `proj` in {"gate", "up", "down"}.
std::string ExpertBase(int64_t layer, std::string_view proj);

}  // namespace tandem

#endif  // TANDEM_COMMON_TENSOR_NAMES_H_
