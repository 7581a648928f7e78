#include "common/model_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/json_util.h"
#include "common/status_macros.h"

namespace tandem {

using nlohmann::json;

std::string_view ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama:
      return "llama";
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kMixtral:
      return "mixtral";
    case Arch::kQwen2Moe:
      return "qwen2_moe";
    case Arch::kQwen3Moe:
      return "qwen3_moe";
    case Arch::kOlmoe:
      return "olmoe";
  }
  return "?";
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (num_experts <= 0) return false;
  switch (arch) {
    case Arch::kMixtral:
    case Arch::kOlmoe:
      return true;
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
      if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) !=
          mlp_only_layers.end()) {
        return false;
      }
      return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
    case Arch::kLlama:
    case Arch::kQwen2:
      return false;
  }
  return false;
}

namespace {

// Bounds that keep every product of two sizes far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxExperts = 65536;

absl::Status CheckRange(const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " = ", v, " is out of range [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

void DropUnreachableEos(ModelConfig* c) {
  std::erase_if(c->eos_token_ids,
                [c](int64_t id) { return id < 0 || (c->vocab_size > 0 && id >= c->vocab_size); });
}

absl::Status ModelConfig::Validate() const {
  TANDEM_RETURN_IF_ERROR(CheckRange("vocab_size", vocab_size, 1, kMaxDim));
  TANDEM_RETURN_IF_ERROR(CheckRange("hidden_size", hidden_size, 1, kMaxDim));
  TANDEM_RETURN_IF_ERROR(CheckRange("num_layers", num_layers, 1, kMaxLayers));
  TANDEM_RETURN_IF_ERROR(CheckRange("num_heads", num_heads, 1, kMaxDim));
  TANDEM_RETURN_IF_ERROR(CheckRange("num_kv_heads", num_kv_heads, 1, num_heads));
  TANDEM_RETURN_IF_ERROR(CheckRange("head_dim", head_dim, 2, kMaxDim));
  TANDEM_RETURN_IF_ERROR(CheckRange("num_heads * head_dim", num_heads * head_dim, 1, kMaxDim));
  TANDEM_RETURN_IF_ERROR(CheckRange("max_position", max_position, 1, int64_t{1} << 40));
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_heads (", num_heads, ") is not a multiple of num_kv_heads (", num_kv_heads, ")"));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", head_dim, " is odd (RoPE needs pairs)"));
  }
  if (!(rms_norm_eps > 0.0f) || !std::isfinite(rms_norm_eps)) {
    return absl::InvalidArgumentError(absl::StrCat("rms_norm_eps ", rms_norm_eps, " must be > 0"));
  }
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_theta ", rope_theta, " must be > 0"));
  }
  if (rope_scaling.type != RopeScaling::Type::kNone) {
    if (!(rope_scaling.factor > 0.0f) || !std::isfinite(rope_scaling.factor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope scaling factor ", rope_scaling.factor, " must be > 0"));
    }
    if (rope_scaling.type == RopeScaling::Type::kLlama3 &&
        (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
         rope_scaling.original_max_position <= 0)) {
      return absl::InvalidArgumentError(
          "llama3 rope scaling needs high_freq_factor > low_freq_factor and "
          "original_max_position_embeddings > 0");
    }
  }
  TANDEM_RETURN_IF_ERROR(CheckRange("sliding_window", sliding_window, 0, int64_t{1} << 40));

  const bool dense_arch = arch == Arch::kLlama || arch == Arch::kQwen2;
  if (dense_arch && num_experts != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(ArchName(arch)), " is a dense architecture but num_experts = ", num_experts));
  }
  if (!dense_arch) {
    TANDEM_RETURN_IF_ERROR(CheckRange("num_experts", num_experts, 1, kMaxExperts));
    TANDEM_RETURN_IF_ERROR(CheckRange("num_experts_per_tok", num_experts_per_tok, 1, num_experts));
    TANDEM_RETURN_IF_ERROR(CheckRange("moe_intermediate_size", moe_intermediate_size, 1, kMaxDim));
    TANDEM_RETURN_IF_ERROR(
        CheckRange("shared_expert_intermediate_size", shared_expert_intermediate_size, 0, kMaxDim));
    TANDEM_RETURN_IF_ERROR(CheckRange("decoder_sparse_step", decoder_sparse_step, 1, kMaxLayers));
    for (int64_t l : mlp_only_layers) {
      TANDEM_RETURN_IF_ERROR(CheckRange("mlp_only_layers entry", l, 0, num_layers - 1));
    }
  }
  if (shared_expert_intermediate_size != 0 && arch != Arch::kQwen2Moe) {
    return absl::InvalidArgumentError("only qwen2_moe has a shared expert");
  }
  bool any_dense = false;
  for (int64_t l = 0; l < num_layers && !any_dense; ++l) any_dense = !IsMoeLayer(l);
  if (any_dense) {
    TANDEM_RETURN_IF_ERROR(CheckRange("intermediate_size", intermediate_size, 1, kMaxDim));
  } else {
    TANDEM_RETURN_IF_ERROR(CheckRange("intermediate_size", intermediate_size, 0, kMaxDim));
  }
  if (bos_token_id < -1 || bos_token_id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bos_token_id ", bos_token_id, " is outside the vocabulary (", vocab_size, ")"));
  }
  for (int64_t e : eos_token_ids) {
    if (e < 0 || e >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("eos_token_id ", e, " is outside the vocabulary (", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

constexpr const char* kSupportedHf = "llama, mistral, qwen2, mixtral, qwen2_moe, qwen3_moe, olmoe";

// transformers 5.x defaults of each configuration class.
struct HfDefaults {
  int64_t vocab, hidden, inter, layers, heads;
  std::optional<int64_t> kv;  // nullopt: = heads
  int64_t max_pos;
  double eps;
  double theta;
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;
  int64_t sliding_window;  // mistral only
  int64_t experts, topk, moe_inter, shared;
};

// Fields in order: vocab, hidden, inter, layers, heads, kv, max_pos, eps,
// theta, bos, eos, sliding_window, experts, topk, moe_inter, shared.
HfDefaults DefaultsFor(Arch arch, bool mistral) {
  const std::optional<int64_t> none;
  switch (arch) {
    case Arch::kLlama:
      if (mistral) {
        return {32000, 4096, 14336, 32, 32, 8, 4096 * 32, 1e-6, 1e4, 1, {2}, 4096, 0, 0, 0, 0};
      }
      return {32000, 4096, 11008, 32, 32, none, 2048, 1e-6, 1e4, 1, {2}, 0, 0, 0, 0, 0};
    case Arch::kQwen2:
      return {151936, 4096, 22016, 32, 32, 32, 32768, 1e-6, 1e4, none, {}, 0, 0, 0, 0, 0};
    case Arch::kMixtral:
      return {32000, 4096, 14336, 32, 32, 8, 4096 * 32, 1e-5, 1e6, 1, {2}, 0, 8, 2, 0, 0};
    case Arch::kQwen2Moe:
      return {151936, 2048, 5632, 24, 16, 16, 32768, 1e-6, 1e4, none, {}, 0, 60, 4, 1408, 5632};
    case Arch::kQwen3Moe:
      return {151936, 2048, 6144, 24, 32, 4, 32768, 1e-6, 1e4, none, {}, 0, 128, 8, 768, 0};
    case Arch::kOlmoe:
      return {50304, 2048, 2048, 16, 16, none, 4096, 1e-5, 1e4, none, {50279}, 0, 64, 8, 0, 0};
  }
  return {32000, 4096, 11008, 32, 32, none, 2048, 1e-6, 1e4, 1, {2}, 0, 0, 0, 0, 0};
}

std::optional<std::pair<Arch, bool>> ArchFromModelType(const std::string& t) {
  if (t == "llama") return std::make_pair(Arch::kLlama, false);
  if (t == "mistral") return std::make_pair(Arch::kLlama, true);
  if (t == "qwen2") return std::make_pair(Arch::kQwen2, false);
  if (t == "mixtral") return std::make_pair(Arch::kMixtral, false);
  if (t == "qwen2_moe") return std::make_pair(Arch::kQwen2Moe, false);
  if (t == "qwen3_moe") return std::make_pair(Arch::kQwen3Moe, false);
  if (t == "olmoe") return std::make_pair(Arch::kOlmoe, false);
  return std::nullopt;
}

std::optional<std::string> ModelTypeFromClass(const std::string& c) {
  if (c == "LlamaForCausalLM") return "llama";
  if (c == "MistralForCausalLM") return "mistral";
  if (c == "Qwen2ForCausalLM") return "qwen2";
  if (c == "MixtralForCausalLM") return "mixtral";
  if (c == "Qwen2MoeForCausalLM") return "qwen2_moe";
  if (c == "Qwen3MoeForCausalLM") return "qwen3_moe";
  if (c == "OlmoeForCausalLM") return "olmoe";
  return std::nullopt;
}

absl::Status Unsupported(const std::string& source, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(source, ": ", what));
}

// rope_theta and rope scaling, from v4 (rope_theta + rope_scaling) or v5
// (rope_parameters) layouts.
absl::Status ParseRope(const json& j, const std::string& source, double default_theta,
                       ModelConfig* c) {
  using json_util::Find;
  const json* rope = Find(j, "rope_scaling");
  const char* rope_key = "rope_scaling";
  if (rope == nullptr) {
    rope = Find(j, "rope_parameters");
    rope_key = "rope_parameters";
  }
  if (rope != nullptr && !rope->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": key '", rope_key, "' must be an object, got ", json_util::TypeName(*rope)));
  }
  static const json kEmpty = json::object();
  if (rope == nullptr) rope = &kEmpty;
  // Per-layer-type nesting (transformers v5): use the full-attention entry.
  if (const json* full = Find(*rope, "full_attention"); full != nullptr && full->is_object()) {
    rope = full;
  }
  const std::string rsource = absl::StrCat(source, " (", rope_key, ")");
  TANDEM_ASSIGN_OR_RETURN(auto theta, json_util::OptDouble(*rope, "rope_theta", rsource));
  if (!theta) {
    TANDEM_ASSIGN_OR_RETURN(theta, json_util::OptDouble(j, "rope_theta", source));
  }
  c->rope_theta = static_cast<float>(theta.value_or(default_theta));

  TANDEM_ASSIGN_OR_RETURN(auto type, json_util::OptString(*rope, "rope_type", rsource));
  if (!type) {
    TANDEM_ASSIGN_OR_RETURN(type, json_util::OptString(*rope, "type", rsource));
  }
  const std::string t = type.value_or("default");
  TANDEM_ASSIGN_OR_RETURN(auto partial,
                          json_util::OptDouble(*rope, "partial_rotary_factor", rsource));
  if (!partial) {
    TANDEM_ASSIGN_OR_RETURN(partial, json_util::OptDouble(j, "partial_rotary_factor", source));
  }
  if (partial && *partial != 1.0) {
    return Unsupported(source,
                       absl::StrCat("partial_rotary_factor ", *partial, " is not supported"));
  }
  if (t == "default") {
    c->rope_scaling = RopeScaling();
    return absl::OkStatus();
  }
  if (t != "linear" && t != "llama3") {
    return Unsupported(source, absl::StrCat("unsupported rope scaling type '", t,
                                            "'; supported: default, linear, llama3"));
  }
  TANDEM_ASSIGN_OR_RETURN(auto factor, json_util::OptDouble(*rope, "factor", rsource));
  if (!factor) {
    return absl::InvalidArgumentError(
        absl::StrCat(rsource, ": rope scaling type '", t, "' needs a 'factor'"));
  }
  RopeScaling rs;
  rs.factor = static_cast<float>(*factor);
  if (t == "linear") {
    rs.type = RopeScaling::Type::kLinear;
  } else {
    rs.type = RopeScaling::Type::kLlama3;
    TANDEM_ASSIGN_OR_RETURN(auto lo, json_util::OptDouble(*rope, "low_freq_factor", rsource));
    TANDEM_ASSIGN_OR_RETURN(auto hi, json_util::OptDouble(*rope, "high_freq_factor", rsource));
    TANDEM_ASSIGN_OR_RETURN(auto orig,
                            json_util::OptInt(*rope, "original_max_position_embeddings", rsource));
    if (!orig) {
      TANDEM_ASSIGN_OR_RETURN(orig,
                              json_util::OptInt(j, "original_max_position_embeddings", source));
    }
    if (lo) rs.low_freq_factor = static_cast<float>(*lo);
    if (hi) rs.high_freq_factor = static_cast<float>(*hi);
    rs.original_max_position = orig.value_or(c->max_position);
  }
  c->rope_scaling = rs;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromHfJson(const json& j, const std::string& source) {
  using json_util::OptBool;
  using json_util::OptInt;
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object, got ", json_util::TypeName(j)));
  }
  // Architecture: model_type, else the first entry of architectures.
  TANDEM_ASSIGN_OR_RETURN(auto model_type, json_util::OptString(j, "model_type", source));
  if (!model_type) {
    const json* archs = json_util::Find(j, "architectures");
    if (archs == nullptr || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": no 'model_type' (or 'architectures') to tell the architecture"));
    }
    const std::string cls = (*archs)[0].get<std::string>();
    model_type = ModelTypeFromClass(cls);
    if (!model_type) {
      return absl::UnimplementedError(absl::StrCat("unsupported architecture '", cls, "' in ",
                                                   source, "; supported: ", kSupportedHf));
    }
  }
  const auto arch = ArchFromModelType(*model_type);
  if (!arch) {
    return absl::UnimplementedError(absl::StrCat("unsupported architecture '", *model_type, "' in ",
                                                 source, "; supported: ", kSupportedHf));
  }
  ModelConfig c;
  c.arch = arch->first;
  c.arch_name = *model_type;
  const HfDefaults d = DefaultsFor(c.arch, arch->second);

  auto get_int = [&](const char* key, int64_t def) -> absl::StatusOr<int64_t> {
    TANDEM_ASSIGN_OR_RETURN(auto v, OptInt(j, key, source));
    return v.value_or(def);
  };
  // The expert count, under either of the names transformers uses for it
  // (its attribute_map aliases num_experts and num_local_experts, and v5
  // saves some architectures under the alias).
  auto get_experts = [&](const char* key, const char* alias,
                         int64_t def) -> absl::StatusOr<int64_t> {
    TANDEM_ASSIGN_OR_RETURN(auto v, OptInt(j, key, source));
    if (!v) {
      TANDEM_ASSIGN_OR_RETURN(v, OptInt(j, alias, source));
    }
    return v.value_or(def);
  };
  TANDEM_ASSIGN_OR_RETURN(c.vocab_size, get_int("vocab_size", d.vocab));
  TANDEM_ASSIGN_OR_RETURN(c.hidden_size, get_int("hidden_size", d.hidden));
  TANDEM_ASSIGN_OR_RETURN(c.intermediate_size, get_int("intermediate_size", d.inter));
  TANDEM_ASSIGN_OR_RETURN(c.num_layers, get_int("num_hidden_layers", d.layers));
  TANDEM_ASSIGN_OR_RETURN(c.num_heads, get_int("num_attention_heads", d.heads));
  TANDEM_ASSIGN_OR_RETURN(c.max_position, get_int("max_position_embeddings", d.max_pos));
  {
    // An explicit null means "same as num_attention_heads".
    const bool has_key = j.find("num_key_value_heads") != j.end();
    TANDEM_ASSIGN_OR_RETURN(auto kv, OptInt(j, "num_key_value_heads", source));
    c.num_kv_heads = kv ? *kv : (has_key ? c.num_heads : d.kv.value_or(c.num_heads));
  }
  TANDEM_ASSIGN_OR_RETURN(auto head_dim, OptInt(j, "head_dim", source));
  if (head_dim) {
    c.head_dim = *head_dim;
  } else {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": hidden_size ", c.hidden_size,
                                                     " is not a multiple of num_attention_heads ",
                                                     c.num_heads, " and there is no head_dim"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  TANDEM_ASSIGN_OR_RETURN(auto eps, json_util::OptDouble(j, "rms_norm_eps", source));
  c.rms_norm_eps = static_cast<float>(eps.value_or(d.eps));
  TANDEM_RETURN_IF_ERROR(ParseRope(j, source, d.theta, &c));
  c.rope_style = RopeStyle::kNeox;
  TANDEM_ASSIGN_OR_RETURN(auto tie, OptBool(j, "tie_word_embeddings", source));
  c.tie_word_embeddings = tie.value_or(false);

  // Token ids.
  TANDEM_ASSIGN_OR_RETURN(auto bos, OptInt(j, "bos_token_id", source));
  if (!bos) bos = j.contains("bos_token_id") ? std::nullopt : d.bos;
  c.bos_token_id = bos.value_or(-1);
  if (const json* eos = json_util::Find(j, "eos_token_id"); eos != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(c.eos_token_ids,
                            json_util::AsIntOrIntList(*eos, source, "key 'eos_token_id'"));
  } else if (!j.contains("eos_token_id")) {
    c.eos_token_ids = d.eos;
  }

  // Activation and unsupported features.
  TANDEM_ASSIGN_OR_RETURN(auto act, json_util::OptString(j, "hidden_act", source));
  if (act && *act != "silu") {
    return Unsupported(source,
                       absl::StrCat("hidden_act '", *act, "' is not supported (only silu)"));
  }
  TANDEM_ASSIGN_OR_RETURN(auto mlp_bias, OptBool(j, "mlp_bias", source));
  if (mlp_bias.value_or(false)) return Unsupported(source, "mlp_bias=true is not supported");
  if (json_util::Find(j, "clip_qkv") != nullptr) {
    return Unsupported(source, "clip_qkv is not supported");
  }

  // Attention biases and q/k norms.
  TANDEM_ASSIGN_OR_RETURN(auto attention_bias, OptBool(j, "attention_bias", source));
  switch (c.arch) {
    case Arch::kQwen2:
      c.qkv_bias = true;
      break;
    case Arch::kQwen2Moe: {
      TANDEM_ASSIGN_OR_RETURN(auto qkv_bias, OptBool(j, "qkv_bias", source));
      c.qkv_bias = qkv_bias.value_or(true);
      break;
    }
    case Arch::kMixtral:
      break;
    case Arch::kLlama:
    case Arch::kQwen3Moe:
    case Arch::kOlmoe:
      c.qkv_bias = c.attn_output_bias = attention_bias.value_or(false);
      break;
  }
  if (c.arch == Arch::kQwen3Moe) c.qk_norm = QkNorm::kPerHead;
  if (c.arch == Arch::kOlmoe) c.qk_norm = QkNorm::kFull;

  // Sliding window.
  if (c.arch == Arch::kLlama && arch->second) {
    const bool has_key = j.contains("sliding_window");
    TANDEM_ASSIGN_OR_RETURN(auto sw, OptInt(j, "sliding_window", source));
    c.sliding_window = sw ? *sw : (has_key ? 0 : d.sliding_window);
  } else if (c.arch == Arch::kMixtral) {
    TANDEM_ASSIGN_OR_RETURN(auto sw, OptInt(j, "sliding_window", source));
    c.sliding_window = sw.value_or(0);
  } else if (c.arch == Arch::kQwen2 || c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
    TANDEM_ASSIGN_OR_RETURN(auto use_sw, OptBool(j, "use_sliding_window", source));
    if (use_sw.value_or(false)) {
      TANDEM_ASSIGN_OR_RETURN(auto sw, OptInt(j, "sliding_window", source));
      c.sliding_window = sw.value_or(4096);
    }
  }

  // Mixture of experts.
  switch (c.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
      break;
    case Arch::kMixtral: {
      TANDEM_ASSIGN_OR_RETURN(c.num_experts,
                              get_experts("num_local_experts", "num_experts", d.experts));
      TANDEM_ASSIGN_OR_RETURN(c.num_experts_per_tok, get_int("num_experts_per_tok", d.topk));
      c.moe_intermediate_size = c.intermediate_size;
      c.norm_topk_prob = true;  // Mixtral always renormalises the top-k weights
      break;
    }
    case Arch::kOlmoe: {
      TANDEM_ASSIGN_OR_RETURN(c.num_experts,
                              get_experts("num_experts", "num_local_experts", d.experts));
      TANDEM_ASSIGN_OR_RETURN(c.num_experts_per_tok, get_int("num_experts_per_tok", d.topk));
      c.moe_intermediate_size = c.intermediate_size;
      TANDEM_ASSIGN_OR_RETURN(auto norm, OptBool(j, "norm_topk_prob", source));
      c.norm_topk_prob = norm.value_or(false);
      break;
    }
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe: {
      TANDEM_ASSIGN_OR_RETURN(c.num_experts,
                              get_experts("num_experts", "num_local_experts", d.experts));
      TANDEM_ASSIGN_OR_RETURN(c.num_experts_per_tok, get_int("num_experts_per_tok", d.topk));
      TANDEM_ASSIGN_OR_RETURN(c.moe_intermediate_size,
                              get_int("moe_intermediate_size", d.moe_inter));
      if (c.arch == Arch::kQwen2Moe) {
        TANDEM_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                                get_int("shared_expert_intermediate_size", d.shared));
      }
      TANDEM_ASSIGN_OR_RETURN(auto norm, OptBool(j, "norm_topk_prob", source));
      c.norm_topk_prob = norm.value_or(false);
      TANDEM_ASSIGN_OR_RETURN(c.decoder_sparse_step, get_int("decoder_sparse_step", 1));
      if (const json* m = json_util::Find(j, "mlp_only_layers"); m != nullptr) {
        TANDEM_ASSIGN_OR_RETURN(c.mlp_only_layers,
                                json_util::AsIntList(*m, source, "key 'mlp_only_layers'"));
      }
      break;
    }
  }

  DropUnreachableEos(&c);
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid config: ", s.message()));
  }
  return c;
}

}  // namespace tandem
