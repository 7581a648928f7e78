#include "common/tensor_names.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem {

namespace {

// Architecture sets as bit masks.
constexpr unsigned Bit(Arch a) { return 1u << static_cast<unsigned>(a); }
constexpr unsigned kAll = Bit(Arch::kLlama) | Bit(Arch::kQwen2) | Bit(Arch::kMixtral) |
                          Bit(Arch::kQwen2Moe) | Bit(Arch::kQwen3Moe) | Bit(Arch::kOlmoe);
constexpr unsigned kMoe =
    Bit(Arch::kMixtral) | Bit(Arch::kQwen2Moe) | Bit(Arch::kQwen3Moe) | Bit(Arch::kOlmoe);
// Archs with a dense MLP in (some) layers.
constexpr unsigned kDenseMlp =
    Bit(Arch::kLlama) | Bit(Arch::kQwen2) | Bit(Arch::kQwen2Moe) | Bit(Arch::kQwen3Moe);

struct Entry {
  const char* hf;     // suffix after "model.layers.N."
  const char* canon;  // suffix after "blk.N."
  unsigned archs;
};

// Order matters for the reverse mapping: the first entry for an arch wins.
constexpr Entry kLayerEntries[] = {
    {"input_layernorm.weight", "attn_norm.weight", kAll},
    {"post_attention_layernorm.weight", "ffn_norm.weight", kAll},
    {"self_attn.q_proj.weight", "attn_q.weight", kAll},
    {"self_attn.k_proj.weight", "attn_k.weight", kAll},
    {"self_attn.v_proj.weight", "attn_v.weight", kAll},
    {"self_attn.o_proj.weight", "attn_output.weight", kAll},
    {"self_attn.q_proj.bias", "attn_q.bias", kAll},
    {"self_attn.k_proj.bias", "attn_k.bias", kAll},
    {"self_attn.v_proj.bias", "attn_v.bias", kAll},
    {"self_attn.o_proj.bias", "attn_output.bias", kAll},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", kAll},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", kAll},
    {"mlp.gate_proj.weight", "ffn_gate.weight", kDenseMlp},
    {"mlp.up_proj.weight", "ffn_up.weight", kDenseMlp},
    {"mlp.down_proj.weight", "ffn_down.weight", kDenseMlp},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight", Bit(Arch::kMixtral)},
    {"mlp.gate.weight", "ffn_gate_inp.weight", kMoe},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", Bit(Arch::kQwen2Moe)},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", Bit(Arch::kQwen2Moe)},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", Bit(Arch::kQwen2Moe)},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", Bit(Arch::kQwen2Moe)},
};

struct ModelEntry {
  const char* hf;
  const char* canon;
};
constexpr ModelEntry kModelEntries[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Per-expert projection names: {HF name (non-mixtral), HF name (mixtral), proj}.
struct ExpertProj {
  const char* hf;
  const char* mixtral;
  const char* proj;
};
constexpr ExpertProj kExpertProjs[] = {
    {"gate_proj.weight", "w1.weight", "gate"},
    {"up_proj.weight", "w3.weight", "up"},
    {"down_proj.weight", "w2.weight", "down"},
};

bool Has(Arch arch, unsigned mask) { return (mask & Bit(arch)) != 0; }

bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// Parses a decimal index (at most 9 digits, no sign) followed by '.'.
bool ConsumeIndex(std::string_view* s, int64_t* out) {
  size_t n = 0;
  int64_t v = 0;
  while (n < s->size() && n < 10 && (*s)[n] >= '0' && (*s)[n] <= '9') {
    v = v * 10 + ((*s)[n] - '0');
    ++n;
  }
  if (n == 0 || n > 9 || n >= s->size() || (*s)[n] != '.') return false;
  if (n > 1 && (*s)[0] == '0') return false;  // no leading zeros
  *out = v;
  s->remove_prefix(n + 1);
  return true;
}

std::optional<HfTensorRef> MapExpert(Arch arch, int64_t layer, std::string_view rest) {
  HfTensorRef ref;
  ref.layer = layer;
  if (rest == "gate_up_proj" || rest == "gate_up_proj.weight") {
    ref.kind = HfTensorRef::Kind::kFusedGateUp;
    ref.canonical = absl::StrCat("blk.", layer);
    return ref;
  }
  if (rest == "down_proj" || rest == "down_proj.weight") {
    ref.kind = HfTensorRef::Kind::kFusedDown;
    ref.canonical = absl::StrCat("blk.", layer);
    return ref;
  }
  int64_t e;
  if (!ConsumeIndex(&rest, &e)) return std::nullopt;
  for (const ExpertProj& p : kExpertProjs) {
    if (rest == (arch == Arch::kMixtral ? p.mixtral : p.hf)) {
      ref.kind = HfTensorRef::Kind::kExpert;
      ref.canonical = ExpertBase(layer, p.proj);
      ref.expert = e;
      return ref;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string ExpertBase(int64_t layer, std::string_view proj) {
  return absl::StrCat("blk.", layer, ".ffn_", std::string(proj), "_exps");
}

std::optional<HfTensorRef> MapHfTensorName(Arch arch, std::string_view name) {
  for (const ModelEntry& m : kModelEntries) {
    if (name == m.hf) {
      HfTensorRef ref;
      ref.canonical = m.canon;
      return ref;
    }
  }
  std::string_view rest = name;
  int64_t layer;
  if (!ConsumePrefix(&rest, "model.layers.") || !ConsumeIndex(&rest, &layer)) return std::nullopt;
  for (const Entry& e : kLayerEntries) {
    if (rest == e.hf && Has(arch, e.archs)) {
      HfTensorRef ref;
      ref.canonical = absl::StrCat("blk.", layer, ".", e.canon);
      ref.layer = layer;
      return ref;
    }
  }
  if (!Has(arch, kMoe)) return std::nullopt;
  if (ConsumePrefix(&rest, "mlp.experts.") ||
      (arch == Arch::kMixtral && ConsumePrefix(&rest, "block_sparse_moe.experts."))) {
    return MapExpert(arch, layer, rest);
  }
  return std::nullopt;
}

std::string HfNameForCanonical(Arch arch, std::string_view canonical, int64_t expert) {
  for (const ModelEntry& m : kModelEntries) {
    if (canonical == m.canon) return m.hf;
  }
  std::string_view rest = canonical;
  int64_t layer;
  if (!ConsumePrefix(&rest, "blk.") || !ConsumeIndex(&rest, &layer)) return "";
  for (const Entry& e : kLayerEntries) {
    if (rest == e.canon && Has(arch, e.archs))
      return absl::StrCat("model.layers.", layer, ".", e.hf);
  }
  if (!Has(arch, kMoe)) return "";
  if (rest.size() > 7 && rest.substr(rest.size() - 7) == ".weight") rest.remove_suffix(7);
  for (const ExpertProj& p : kExpertProjs) {
    if (rest == absl::StrCat("ffn_", p.proj, "_exps")) {
      const std::string e = expert >= 0 ? absl::StrCat(expert) : "*";
      if (arch == Arch::kMixtral) {
        return absl::StrCat("model.layers.", layer, ".block_sparse_moe.experts.", e, ".",
                            p.mixtral);
      }
      return absl::StrCat("model.layers.", layer, ".mlp.experts.", e, ".", p.hf);
    }
  }
  return "";
}

}  // namespace tandem
