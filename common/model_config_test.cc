#include "common/model_config.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kSrc = "/models/x/config.json";

absl::StatusOr<ModelConfig> Parse(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << text;
  return ModelConfigFromHfJson(j, kSrc);
}

ModelConfig ParseOk(const std::string& text) {
  auto c = Parse(text);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig();
}

void ExpectError(const std::string& text, absl::StatusCode code, const std::string& phrase) {
  auto c = Parse(text);
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_EQ(c.status().code(), code) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(kSrc));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(phrase));
}

// Config files as published (abridged to the keys that matter).
TEST(ModelConfigHf, Llama32) {
  const ModelConfig c = ParseOk(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "vocab_size": 128256})");
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.arch_name, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_EQ(c.max_position, 131072);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.attn_output_bias);
  EXPECT_EQ(c.qk_norm, QkNorm::kNone);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_FALSE(c.is_moe());
  EXPECT_FALSE(c.IsMoeLayer(0));
}

TEST(ModelConfigHf, MistralIsLlamaWithSlidingWindow) {
  const ModelConfig c = ParseOk(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
    "vocab_size": 32000})");
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.arch_name, "mistral");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  // v0.2+ sets sliding_window to null: full attention.
  EXPECT_EQ(ParseOk(R"({"model_type": "mistral", "sliding_window": null})").sliding_window, 0);
  // Absent: MistralConfig's default of 4096.
  EXPECT_EQ(ParseOk(R"({"model_type": "mistral"})").sliding_window, 4096);
}

TEST(ModelConfigHf, Qwen2) {
  const ModelConfig c = ParseOk(R"({
    "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151645,
    "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936})");
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.attn_output_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645));
  EXPECT_EQ(ParseOk(R"({"model_type": "qwen2", "use_sliding_window": true,
                        "sliding_window": 1024})")
                .sliding_window,
            1024);
}

TEST(ModelConfigHf, Mixtral) {
  const ModelConfig c = ParseOk(R"({
    "architectures": ["MixtralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false,
    "vocab_size": 32000})");
  EXPECT_EQ(c.arch, Arch::kMixtral);
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 14336);
  EXPECT_EQ(c.shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.sliding_window, 0);
  for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_TRUE(c.IsMoeLayer(l));
}

TEST(ModelConfigHf, Qwen2Moe) {
  const ModelConfig c = ParseOk(R"({
    "architectures": ["Qwen2MoeForCausalLM"], "bos_token_id": 151643, "decoder_sparse_step": 1,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5632, "max_position_embeddings": 8192, "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408, "norm_topk_prob": false, "num_attention_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "shared_expert_intermediate_size": 5632, "tie_word_embeddings": false,
    "use_sliding_window": false, "vocab_size": 151936})");
  EXPECT_EQ(c.arch, Arch::kQwen2Moe);
  EXPECT_EQ(c.num_experts, 60);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe_intermediate_size, 1408);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  EXPECT_TRUE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(23));
}

TEST(ModelConfigHf, Qwen3Moe) {
  const ModelConfig c = ParseOk(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
    "sliding_window": null, "tie_word_embeddings": false, "use_sliding_window": false,
    "vocab_size": 151936})");
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_EQ(c.qk_norm, QkNorm::kPerHead);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_EQ(c.shared_expert_intermediate_size, 0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  // Qwen3MoeConfig's default is norm_topk_prob=False.
  EXPECT_FALSE(ParseOk(R"({"model_type": "qwen3_moe"})").norm_topk_prob);
  // attention_bias covers q/k/v and o.
  const ModelConfig b = ParseOk(R"({"model_type": "qwen3_moe", "attention_bias": true})");
  EXPECT_TRUE(b.qkv_bias);
  EXPECT_TRUE(b.attn_output_bias);
}

TEST(ModelConfigHf, Olmoe) {
  const ModelConfig c = ParseOk(R"({
    "architectures": ["OlmoeForCausalLM"], "attention_bias": false, "clip_qkv": null,
    "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 1024, "max_position_embeddings": 4096, "model_type": "olmoe",
    "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 64,
    "num_experts_per_tok": 8, "num_hidden_layers": 16, "num_key_value_heads": 16,
    "pad_token_id": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "vocab_size": 50304})");
  EXPECT_EQ(c.arch, Arch::kOlmoe);
  EXPECT_EQ(c.qk_norm, QkNorm::kFull);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 1024);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(50279));
  EXPECT_TRUE(c.IsMoeLayer(15));
}

// Keys absent from config.json take transformers' class defaults.
TEST(ModelConfigHf, DefaultsMatchTransformers) {
  const ModelConfig llama = ParseOk(R"({"model_type": "llama"})");
  EXPECT_EQ(llama.vocab_size, 32000);
  EXPECT_EQ(llama.hidden_size, 4096);
  EXPECT_EQ(llama.intermediate_size, 11008);
  EXPECT_EQ(llama.num_kv_heads, 32);  // None -> num_attention_heads
  EXPECT_EQ(llama.head_dim, 128);
  EXPECT_EQ(llama.max_position, 2048);
  EXPECT_FLOAT_EQ(llama.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(llama.rope_theta, 10000.0f);
  EXPECT_EQ(llama.bos_token_id, 1);
  EXPECT_THAT(llama.eos_token_ids, ElementsAre(2));
  EXPECT_FALSE(llama.tie_word_embeddings);

  const ModelConfig qwen2 = ParseOk(R"({"model_type": "qwen2"})");
  EXPECT_EQ(qwen2.num_kv_heads, 32);
  EXPECT_EQ(qwen2.intermediate_size, 22016);
  EXPECT_EQ(qwen2.bos_token_id, -1);
  EXPECT_TRUE(qwen2.eos_token_ids.empty());

  const ModelConfig mixtral = ParseOk(R"({"model_type": "mixtral"})");
  EXPECT_FLOAT_EQ(mixtral.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(mixtral.rms_norm_eps, 1e-5f);
  EXPECT_EQ(mixtral.num_kv_heads, 8);
  EXPECT_EQ(mixtral.num_experts, 8);
  EXPECT_EQ(mixtral.num_experts_per_tok, 2);
  EXPECT_EQ(mixtral.max_position, 131072);

  const ModelConfig q2m = ParseOk(R"({"model_type": "qwen2_moe"})");
  EXPECT_EQ(q2m.num_experts, 60);
  EXPECT_EQ(q2m.num_experts_per_tok, 4);
  EXPECT_EQ(q2m.moe_intermediate_size, 1408);
  EXPECT_EQ(q2m.shared_expert_intermediate_size, 5632);
  EXPECT_TRUE(q2m.qkv_bias);
  EXPECT_FALSE(ParseOk(R"({"model_type": "qwen2_moe", "qkv_bias": false})").qkv_bias);

  const ModelConfig q3m = ParseOk(R"({"model_type": "qwen3_moe"})");
  EXPECT_EQ(q3m.num_experts, 128);
  EXPECT_EQ(q3m.num_experts_per_tok, 8);
  EXPECT_EQ(q3m.moe_intermediate_size, 768);
  EXPECT_EQ(q3m.num_kv_heads, 4);
  EXPECT_EQ(q3m.head_dim, 64);

  const ModelConfig olmoe = ParseOk(R"({"model_type": "olmoe"})");
  EXPECT_EQ(olmoe.vocab_size, 50304);
  EXPECT_EQ(olmoe.num_experts, 64);
  EXPECT_EQ(olmoe.moe_intermediate_size, 2048);
  EXPECT_THAT(olmoe.eos_token_ids, ElementsAre(50279));
  EXPECT_FLOAT_EQ(olmoe.rms_norm_eps, 1e-5f);
}

TEST(ModelConfigHf, NullKvHeadsMeansAllHeadsAndNullEosMeansNone) {
  const ModelConfig c = ParseOk(R"({"model_type": "qwen2", "num_attention_heads": 8,
                                    "hidden_size": 512, "num_key_value_heads": null,
                                    "eos_token_id": null})");
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ModelConfigHf, EosIdsOutsideTheVocabularyAreDropped) {
  const ModelConfig c = ParseOk(R"({"model_type": "llama", "eos_token_id": [2, 32000, -1]})");
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
}

// transformers' attribute_map aliases num_experts and num_local_experts;
// v5 saves qwen3_moe's count under num_local_experts.
TEST(ModelConfigHf, ExpertCountUnderEitherName) {
  EXPECT_EQ(ParseOk(R"({"model_type": "qwen3_moe", "num_local_experts": 16})").num_experts, 16);
  EXPECT_EQ(ParseOk(R"({"model_type": "olmoe", "num_local_experts": 16})").num_experts, 16);
  EXPECT_EQ(ParseOk(R"({"model_type": "mixtral", "num_experts": 16})").num_experts, 16);
  EXPECT_EQ(ParseOk(R"({"model_type": "qwen2_moe", "num_experts": 16, "num_local_experts": 8})")
                .num_experts,
            16);
}

TEST(ModelConfigHf, ArchitecturesWhenModelTypeIsMissing) {
  const ModelConfig c = ParseOk(R"({"architectures": ["Qwen3MoeForCausalLM"]})");
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  ExpectError(R"({"architectures": ["GPTNeoXForCausalLM"]})", absl::StatusCode::kUnimplemented,
              "unsupported architecture 'GPTNeoXForCausalLM'");
  ExpectError(R"({"hidden_size": 8})", absl::StatusCode::kInvalidArgument, "model_type");
}

TEST(ModelConfigHf, UnsupportedArchitectureNamesItAndTheFile) {
  auto c = Parse(R"({"model_type": "gpt_neox"})");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr(std::string("unsupported architecture 'gpt_neox' in ") + kSrc +
                        "; supported: llama, mistral, qwen2, mixtral, qwen2_moe, qwen3_moe, "
                        "olmoe"));
}

TEST(ModelConfigHf, RopeParametersOfTransformersV5) {
  const ModelConfig c = ParseOk(R"({"model_type": "llama", "max_position_embeddings": 4096,
      "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
                          "low_freq_factor": 2.0, "high_freq_factor": 8.0}})");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 2.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 4096);  // defaults to max_position

  const ModelConfig d = ParseOk(
      R"({"model_type": "qwen2", "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}})");
  EXPECT_FLOAT_EQ(d.rope_theta, 1e6f);
  EXPECT_EQ(d.rope_scaling.type, RopeScaling::Type::kNone);
  // rope_theta inside the dict wins over the top-level key.
  EXPECT_FLOAT_EQ(
      ParseOk(
          R"({"model_type": "llama", "rope_theta": 1.0, "rope_parameters": {"rope_theta": 7.0}})")
          .rope_theta,
      7.0f);
}

TEST(ModelConfigHf, LinearRopeScalingWithTheLegacyTypeKey) {
  const ModelConfig c =
      ParseOk(R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}})");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 2.0f);
}

TEST(ModelConfigHf, UnsupportedFeaturesAreUnimplemented) {
  ExpectError(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4}})",
              absl::StatusCode::kUnimplemented, "unsupported rope scaling type 'yarn'");
  ExpectError(R"({"model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 4}})",
              absl::StatusCode::kUnimplemented, "'dynamic'");
  ExpectError(R"({"model_type": "llama", "mlp_bias": true})", absl::StatusCode::kUnimplemented,
              "mlp_bias");
  ExpectError(R"({"model_type": "olmoe", "clip_qkv": 8.0})", absl::StatusCode::kUnimplemented,
              "clip_qkv");
  ExpectError(R"({"model_type": "llama", "hidden_act": "gelu"})", absl::StatusCode::kUnimplemented,
              "hidden_act 'gelu'");
  ExpectError(R"({"model_type": "llama", "partial_rotary_factor": 0.5})",
              absl::StatusCode::kUnimplemented, "partial_rotary_factor");
}

TEST(ModelConfigHf, WrongValueKindsAreInvalidArgument) {
  ExpectError(R"({"model_type": "llama", "hidden_size": "2048"})",
              absl::StatusCode::kInvalidArgument,
              "key 'hidden_size' must be an integer, got string");
  ExpectError(R"({"model_type": "llama", "hidden_size": 2048.5})",
              absl::StatusCode::kInvalidArgument, "hidden_size");
  ExpectError(R"({"model_type": "llama", "tie_word_embeddings": "yes"})",
              absl::StatusCode::kInvalidArgument, "must be a boolean");
  ExpectError(R"({"model_type": "llama", "eos_token_id": "2"})", absl::StatusCode::kInvalidArgument,
              "eos_token_id");
  ExpectError(R"({"model_type": "llama", "eos_token_id": [1, "2"]})",
              absl::StatusCode::kInvalidArgument, "eos_token_id");
  ExpectError(R"({"model_type": 7})", absl::StatusCode::kInvalidArgument, "model_type");
  ExpectError(R"({"model_type": "llama", "rope_scaling": "linear"})",
              absl::StatusCode::kInvalidArgument, "rope_scaling");
  ExpectError(R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear"}})",
              absl::StatusCode::kInvalidArgument, "factor");
  ExpectError(R"({"model_type": "qwen2_moe", "mlp_only_layers": 3})",
              absl::StatusCode::kInvalidArgument, "mlp_only_layers");
  ExpectError(R"({"model_type": "llama", "hidden_size": 18446744073709551615})",
              absl::StatusCode::kInvalidArgument, "out of range");
  ExpectError("[1]", absl::StatusCode::kInvalidArgument, "object");
  // Integral floats are accepted where integers are expected.
  EXPECT_EQ(ParseOk(R"({"model_type": "llama", "max_position_embeddings": 4096.0})").max_position,
            4096);
}

TEST(ModelConfigHf, InconsistentValuesAreInvalidArgument) {
  ExpectError(R"({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5})",
              absl::StatusCode::kInvalidArgument, "multiple of num_kv_heads");
  ExpectError(R"({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3})",
              absl::StatusCode::kInvalidArgument, "not a multiple");
  ExpectError(R"({"model_type": "mixtral", "num_experts_per_tok": 9})",
              absl::StatusCode::kInvalidArgument, "num_experts_per_tok");
  ExpectError(R"({"model_type": "qwen2_moe", "mlp_only_layers": [24]})",
              absl::StatusCode::kInvalidArgument, "mlp_only_layers");
  ExpectError(R"({"model_type": "llama", "vocab_size": 0})", absl::StatusCode::kInvalidArgument,
              "vocab_size");
  ExpectError(R"({"model_type": "llama", "rms_norm_eps": -1})", absl::StatusCode::kInvalidArgument,
              "rms_norm_eps");
  ExpectError(R"({"model_type": "llama", "bos_token_id": 32000})",
              absl::StatusCode::kInvalidArgument, "bos_token_id");
  ExpectError(R"({"model_type": "qwen2_moe", "decoder_sparse_step": 0})",
              absl::StatusCode::kInvalidArgument, "decoder_sparse_step");
  ExpectError(R"({"model_type": "llama", "num_hidden_layers": 100000000})",
              absl::StatusCode::kInvalidArgument, "num_layers");
}

TEST(ModelConfig, IsMoeLayerFollowsSparseStepAndMlpOnlyLayers) {
  const ModelConfig c = ParseOk(R"({"model_type": "qwen2_moe", "num_hidden_layers": 6,
                                    "decoder_sparse_step": 2, "mlp_only_layers": [3]})");
  std::vector<bool> moe;
  for (int64_t l = 0; l < 6; ++l) moe.push_back(c.IsMoeLayer(l));
  EXPECT_THAT(moe, ElementsAre(false, true, false, false, false, true));

  ModelConfig dense = c;
  dense.num_experts = 0;
  EXPECT_FALSE(dense.IsMoeLayer(1));
}

TEST(ModelConfig, ValidateAcceptsTransformersDefaultsOfEveryArch) {
  for (const char* t :
       {"llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}) {
    auto c = Parse(absl::StrCat(R"({"model_type": ")", t, R"("})"));
    EXPECT_TRUE(c.ok()) << t << ": " << c.status();
  }
}

TEST(ModelConfig, ArchNames) {
  EXPECT_EQ(ArchName(Arch::kLlama), "llama");
  EXPECT_EQ(ArchName(Arch::kQwen2), "qwen2");
  EXPECT_EQ(ArchName(Arch::kMixtral), "mixtral");
  EXPECT_EQ(ArchName(Arch::kQwen2Moe), "qwen2_moe");
  EXPECT_EQ(ArchName(Arch::kQwen3Moe), "qwen3_moe");
  EXPECT_EQ(ArchName(Arch::kOlmoe), "olmoe");
}

}  // namespace
}  // namespace tandem
