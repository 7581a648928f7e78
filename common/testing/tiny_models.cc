#include "common/testing/tiny_models.h"

#include "absl/strings/str_cat.h"
#include "common/checkpoint_schema.h"
#include "common/status_macros.h"
#include "common/tensor_names.h"

namespace tandem::testing {

using nlohmann::json;

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Layer index of "blk.N.xxx".
int64_t LayerOf(const std::string& name) {
  int64_t n = 0;
  for (size_t i = 4; i < name.size() && name[i] != '.'; ++i) n = n * 10 + (name[i] - '0');
  return n;
}

const char* ClassName(Arch a) {
  switch (a) {
    case Arch::kLlama:
      return "LlamaForCausalLM";
    case Arch::kQwen2:
      return "Qwen2ForCausalLM";
    case Arch::kMixtral:
      return "MixtralForCausalLM";
    case Arch::kQwen2Moe:
      return "Qwen2MoeForCausalLM";
    case Arch::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case Arch::kOlmoe:
      return "OlmoeForCausalLM";
  }
  return "";
}

const char* GgufArch(Arch a) {
  switch (a) {
    case Arch::kLlama:
    case Arch::kMixtral:
      return "llama";
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kQwen2Moe:
      return "qwen2moe";
    case Arch::kQwen3Moe:
      return "qwen3moe";
    case Arch::kOlmoe:
      return "olmoe";
  }
  return "";
}

}  // namespace

ModelConfig TinyConfig(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.arch_name = std::string(ArchName(arch));
  c.vocab_size = 128;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position = 256;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  switch (arch) {
    case Arch::kLlama:
      c.tie_word_embeddings = true;
      break;
    case Arch::kQwen2:
      c.qkv_bias = true;
      break;
    case Arch::kMixtral:
      c.num_experts = 4;
      c.num_experts_per_tok = 2;
      c.moe_intermediate_size = c.intermediate_size = 32;
      c.norm_topk_prob = true;
      break;
    case Arch::kQwen2Moe:
      c.num_layers = 3;
      c.qkv_bias = true;
      c.num_experts = 4;
      c.num_experts_per_tok = 2;
      c.moe_intermediate_size = 32;
      c.shared_expert_intermediate_size = 64;
      c.mlp_only_layers = {1};
      break;
    case Arch::kQwen3Moe:
      c.qk_norm = QkNorm::kPerHead;
      c.num_experts = 4;
      c.num_experts_per_tok = 2;
      c.moe_intermediate_size = 32;
      c.norm_topk_prob = true;
      break;
    case Arch::kOlmoe:
      c.qk_norm = QkNorm::kFull;
      c.num_experts = 4;
      c.num_experts_per_tok = 2;
      c.moe_intermediate_size = c.intermediate_size = 32;
      break;
  }
  return c;
}

json HfConfigJson(const ModelConfig& c) {
  json j = json::object();
  j["model_type"] = c.arch_name.empty() ? std::string(ArchName(c.arch)) : c.arch_name;
  j["architectures"] = json::array({ClassName(c.arch)});
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "bfloat16";
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
  } else if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  }
  if (c.arch == Arch::kLlama || c.arch == Arch::kQwen3Moe || c.arch == Arch::kOlmoe) {
    j["attention_bias"] = c.attn_output_bias;
  }
  switch (c.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
      break;
    case Arch::kMixtral:
      j["num_local_experts"] = c.num_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      break;
    case Arch::kOlmoe:
      j["num_experts"] = c.num_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["clip_qkv"] = nullptr;
      break;
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
      j["num_experts"] = c.num_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["decoder_sparse_step"] = c.decoder_sparse_step;
      j["mlp_only_layers"] = c.mlp_only_layers;
      if (c.arch == Arch::kQwen2Moe) {
        j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
        j["qkv_bias"] = c.qkv_bias;
      }
      break;
  }
  return j;
}

GgufMetadata GgufMetadataFor(const ModelConfig& c) {
  const std::string a = GgufArch(c.arch);
  auto k = [&a](const char* key) { return absl::StrCat(a, ".", key); };
  auto u32 = [](int64_t v) { return GgufUint32(static_cast<uint32_t>(v)); };
  GgufMetadata m;
  m.emplace_back("general.architecture", GgufString(a));
  m.emplace_back("general.name", GgufString(absl::StrCat("tiny-", std::string(ArchName(c.arch)))));
  m.emplace_back(k("block_count"), u32(c.num_layers));
  m.emplace_back(k("context_length"), u32(c.max_position));
  m.emplace_back(k("embedding_length"), u32(c.hidden_size));
  m.emplace_back(k("feed_forward_length"), u32(c.intermediate_size));
  m.emplace_back(k("attention.head_count"), u32(c.num_heads));
  m.emplace_back(k("attention.head_count_kv"), u32(c.num_kv_heads));
  m.emplace_back(k("attention.key_length"), u32(c.head_dim));
  m.emplace_back(k("attention.value_length"), u32(c.head_dim));
  m.emplace_back(k("attention.layer_norm_rms_epsilon"), GgufFloat32(c.rms_norm_eps));
  m.emplace_back(k("rope.freq_base"), GgufFloat32(c.rope_theta));
  m.emplace_back(k("rope.dimension_count"), u32(c.head_dim));
  m.emplace_back(k("vocab_size"), u32(c.vocab_size));
  if (c.rope_scaling.type == RopeScaling::Type::kLinear) {
    m.emplace_back(k("rope.scaling.type"), GgufString("linear"));
    m.emplace_back(k("rope.scaling.factor"), GgufFloat32(c.rope_scaling.factor));
  }
  if (c.is_moe()) {
    m.emplace_back(k("expert_count"), u32(c.num_experts));
    m.emplace_back(k("expert_used_count"), u32(c.num_experts_per_tok));
    m.emplace_back(k("expert_feed_forward_length"), u32(c.moe_intermediate_size));
    if (c.shared_expert_intermediate_size > 0) {
      m.emplace_back(k("expert_shared_feed_forward_length"),
                     u32(c.shared_expert_intermediate_size));
    }
    m.emplace_back(k("expert_weights_norm"), GgufBool(c.norm_topk_prob));
  }
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < c.vocab_size; ++i) tokens.push_back(absl::StrCat("<t", i, ">"));
  m.emplace_back("tokenizer.ggml.model", GgufString("gpt2"));
  m.emplace_back("tokenizer.ggml.tokens", GgufStringArray(std::move(tokens)));
  if (c.bos_token_id >= 0) m.emplace_back("tokenizer.ggml.bos_token_id", u32(c.bos_token_id));
  if (!c.eos_token_ids.empty()) {
    m.emplace_back("tokenizer.ggml.eos_token_id", u32(c.eos_token_ids[0]));
  }
  return m;
}

std::vector<TestTensor> MakeCanonicalTensors(const ModelConfig& c, uint32_t seed) {
  std::vector<TestTensor> out;
  uint32_t s = seed * 7919u;
  for (const ExpectedTensor& e : ExpectedTensors(c)) {
    std::vector<int64_t> shape = e.shape;
    std::string name = e.name;
    if (e.expert) {
      shape.insert(shape.begin(), c.num_experts);
      name += ".weight";
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v = RandomValues(n, ++s);
    if (EndsWith(name, "norm.weight")) {
      for (float& x : v) x = 1.0f + 0.2f * x;
    }
    out.push_back(TestTensor::FromF32(std::move(name), std::move(shape), v));
  }
  return out;
}

std::vector<TestTensor> ToHfTensors(const ModelConfig& c, const std::vector<TestTensor>& canonical,
                                    const HfTensorOptions& o) {
  std::vector<TestTensor> out;
  const TestTensor* gate_exps = nullptr;
  for (const TestTensor& t : canonical) {
    const std::vector<float> v = t.ToF32();
    if (!EndsWith(t.name, "_exps.weight")) {
      const std::string hf = HfNameForCanonical(c.arch, t.name);
      TANDEM_CHECK(!hf.empty());
      out.push_back(TestTensor::FromF32(hf, t.shape, v, o.dtype));
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 7);
    const int64_t layer = LayerOf(t.name);
    const int64_t E = t.shape[0], rows = t.shape[1], cols = t.shape[2];
    if (!o.fused_experts) {
      for (int64_t e = 0; e < E; ++e) {
        std::vector<float> slice(v.begin() + e * rows * cols, v.begin() + (e + 1) * rows * cols);
        out.push_back(
            TestTensor::FromF32(HfNameForCanonical(c.arch, base, e), {rows, cols}, slice, o.dtype));
      }
      continue;
    }
    const std::string prefix = absl::StrCat("model.layers.", layer, ".mlp.experts.");
    if (EndsWith(base, "ffn_gate_exps")) {
      gate_exps = &t;  // written together with up
    } else if (EndsWith(base, "ffn_up_exps")) {
      TANDEM_CHECK(gate_exps != nullptr);
      const std::vector<float> g = gate_exps->ToF32();
      std::vector<float> fused;
      for (int64_t e = 0; e < E; ++e) {
        fused.insert(fused.end(), g.begin() + e * rows * cols, g.begin() + (e + 1) * rows * cols);
        fused.insert(fused.end(), v.begin() + e * rows * cols, v.begin() + (e + 1) * rows * cols);
      }
      out.push_back(
          TestTensor::FromF32(prefix + "gate_up_proj", {E, 2 * rows, cols}, fused, o.dtype));
    } else {
      out.push_back(TestTensor::FromF32(prefix + "down_proj", t.shape, v, o.dtype));
    }
  }
  return out;
}

std::vector<float> PermuteQkRows(const std::vector<float>& w, int64_t n_head, int64_t head_dim,
                                 int64_t cols) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t src = h * head_dim + i * half + j;
        const int64_t dst = h * head_dim + 2 * j + i;
        std::copy(w.begin() + src * cols, w.begin() + (src + 1) * cols, out.begin() + dst * cols);
      }
    }
  }
  return out;
}

std::vector<TestTensor> ToGgufTensors(const ModelConfig& c,
                                      const std::vector<TestTensor>& canonical,
                                      const GgufTensorOptions& o) {
  std::vector<TestTensor> out;
  const bool permute = o.permute_qk && (c.arch == Arch::kLlama || c.arch == Arch::kMixtral);
  for (const TestTensor& t : canonical) {
    std::vector<float> v = t.ToF32();
    std::vector<int64_t> shape = t.shape;
    if (permute) {
      const bool q = EndsWith(t.name, "attn_q.weight") || EndsWith(t.name, "attn_q.bias");
      const bool k = EndsWith(t.name, "attn_k.weight") || EndsWith(t.name, "attn_k.bias");
      if (q || k) {
        const int64_t cols = shape.size() == 2 ? shape[1] : 1;
        v = PermuteQkRows(v, q ? c.num_heads : c.num_kv_heads, c.head_dim, cols);
      }
    }
    if (EndsWith(t.name, "ffn_gate_inp_shexp.weight")) shape = {c.hidden_size};
    DType dt = o.matrix_dtype;
    if (shape.size() == 1) {
      dt = DType::kF32;
    } else if (t.name == "token_embd.weight") {
      dt = o.embedding_dtype;
    }
    out.push_back(TestTensor::FromF32(t.name, shape, v, dt));
  }
  return out;
}

absl::Status WriteTinyHfModel(const std::string& dir, const ModelConfig& c, uint32_t seed,
                              const HfTensorOptions& tensor_options,
                              const HfDirOptions& dir_options) {
  return WriteHfDirectory(dir, HfConfigJson(c),
                          ToHfTensors(c, MakeCanonicalTensors(c, seed), tensor_options),
                          dir_options);
}

absl::Status WriteTinyGgufModel(const std::string& path, const ModelConfig& c, uint32_t seed,
                                const GgufTensorOptions& options) {
  return WriteGguf(path, GgufMetadataFor(c),
                   ToGgufTensors(c, MakeCanonicalTensors(c, seed), options));
}

}  // namespace tandem::testing
