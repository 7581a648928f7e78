#include "common/tensor_names.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

using Kind = HfTensorRef::Kind;

struct NameCase {
  Arch arch;
  const char* hf;
  Kind kind;
  const char* canonical;
  int64_t layer;
  int64_t expert;
};

void PrintTo(const NameCase& c, std::ostream* os) { *os << ArchName(c.arch) << " " << c.hf; }

class HfNameMapping : public ::testing::TestWithParam<NameCase> {};

TEST_P(HfNameMapping, MapsToCanonical) {
  const NameCase& c = GetParam();
  const std::optional<HfTensorRef> ref = MapHfTensorName(c.arch, c.hf);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->kind, c.kind);
  EXPECT_EQ(ref->canonical, c.canonical);
  EXPECT_EQ(ref->layer, c.layer);
  EXPECT_EQ(ref->expert, c.expert);
}

constexpr Arch L = Arch::kLlama, Q2 = Arch::kQwen2, MX = Arch::kMixtral, Q2M = Arch::kQwen2Moe,
               Q3M = Arch::kQwen3Moe, OL = Arch::kOlmoe;
constexpr Kind P = Kind::kPlain, E = Kind::kExpert;

INSTANTIATE_TEST_SUITE_P(
    AllArchs, HfNameMapping,
    ::testing::Values(
        NameCase{L, "model.embed_tokens.weight", P, "token_embd.weight", -1, -1},
        NameCase{L, "model.norm.weight", P, "output_norm.weight", -1, -1},
        NameCase{L, "lm_head.weight", P, "output.weight", -1, -1},
        NameCase{L, "model.layers.0.input_layernorm.weight", P, "blk.0.attn_norm.weight", 0, -1},
        NameCase{L, "model.layers.12.post_attention_layernorm.weight", P, "blk.12.ffn_norm.weight",
                 12, -1},
        NameCase{L, "model.layers.3.self_attn.q_proj.weight", P, "blk.3.attn_q.weight", 3, -1},
        NameCase{L, "model.layers.3.self_attn.k_proj.weight", P, "blk.3.attn_k.weight", 3, -1},
        NameCase{L, "model.layers.3.self_attn.v_proj.weight", P, "blk.3.attn_v.weight", 3, -1},
        NameCase{L, "model.layers.3.self_attn.o_proj.weight", P, "blk.3.attn_output.weight", 3, -1},
        NameCase{L, "model.layers.3.self_attn.o_proj.bias", P, "blk.3.attn_output.bias", 3, -1},
        NameCase{L, "model.layers.1.mlp.gate_proj.weight", P, "blk.1.ffn_gate.weight", 1, -1},
        NameCase{L, "model.layers.1.mlp.up_proj.weight", P, "blk.1.ffn_up.weight", 1, -1},
        NameCase{L, "model.layers.1.mlp.down_proj.weight", P, "blk.1.ffn_down.weight", 1, -1},
        NameCase{Q2, "model.layers.5.self_attn.q_proj.bias", P, "blk.5.attn_q.bias", 5, -1},
        NameCase{Q2, "model.layers.5.self_attn.k_proj.bias", P, "blk.5.attn_k.bias", 5, -1},
        NameCase{Q2, "model.layers.5.self_attn.v_proj.bias", P, "blk.5.attn_v.bias", 5, -1},
        NameCase{MX, "model.layers.2.block_sparse_moe.gate.weight", P, "blk.2.ffn_gate_inp.weight",
                 2, -1},
        NameCase{MX, "model.layers.2.mlp.gate.weight", P, "blk.2.ffn_gate_inp.weight", 2, -1},
        NameCase{MX, "model.layers.2.block_sparse_moe.experts.7.w1.weight", E,
                 "blk.2.ffn_gate_exps", 2, 7},
        NameCase{MX, "model.layers.2.block_sparse_moe.experts.7.w3.weight", E, "blk.2.ffn_up_exps",
                 2, 7},
        NameCase{MX, "model.layers.2.block_sparse_moe.experts.0.w2.weight", E,
                 "blk.2.ffn_down_exps", 2, 0},
        NameCase{MX, "model.layers.2.mlp.experts.gate_up_proj", Kind::kFusedGateUp, "blk.2", 2, -1},
        NameCase{MX, "model.layers.2.block_sparse_moe.experts.down_proj", Kind::kFusedDown, "blk.2",
                 2, -1},
        NameCase{Q2M, "model.layers.4.mlp.gate.weight", P, "blk.4.ffn_gate_inp.weight", 4, -1},
        NameCase{Q2M, "model.layers.4.mlp.experts.59.gate_proj.weight", E, "blk.4.ffn_gate_exps", 4,
                 59},
        NameCase{Q2M, "model.layers.4.mlp.experts.1.up_proj.weight", E, "blk.4.ffn_up_exps", 4, 1},
        NameCase{Q2M, "model.layers.4.mlp.experts.1.down_proj.weight", E, "blk.4.ffn_down_exps", 4,
                 1},
        NameCase{Q2M, "model.layers.4.mlp.shared_expert.gate_proj.weight", P,
                 "blk.4.ffn_gate_shexp.weight", 4, -1},
        NameCase{Q2M, "model.layers.4.mlp.shared_expert.up_proj.weight", P,
                 "blk.4.ffn_up_shexp.weight", 4, -1},
        NameCase{Q2M, "model.layers.4.mlp.shared_expert.down_proj.weight", P,
                 "blk.4.ffn_down_shexp.weight", 4, -1},
        NameCase{Q2M, "model.layers.4.mlp.shared_expert_gate.weight", P,
                 "blk.4.ffn_gate_inp_shexp.weight", 4, -1},
        NameCase{Q2M, "model.layers.0.mlp.gate_proj.weight", P, "blk.0.ffn_gate.weight", 0, -1},
        NameCase{Q3M, "model.layers.9.self_attn.q_norm.weight", P, "blk.9.attn_q_norm.weight", 9,
                 -1},
        NameCase{Q3M, "model.layers.9.self_attn.k_norm.weight", P, "blk.9.attn_k_norm.weight", 9,
                 -1},
        NameCase{Q3M, "model.layers.9.mlp.experts.gate_up_proj", Kind::kFusedGateUp, "blk.9", 9,
                 -1},
        NameCase{Q3M, "model.layers.9.mlp.experts.down_proj", Kind::kFusedDown, "blk.9", 9, -1},
        NameCase{Q3M, "model.layers.9.mlp.experts.127.down_proj.weight", E, "blk.9.ffn_down_exps",
                 9, 127},
        NameCase{OL, "model.layers.15.self_attn.q_norm.weight", P, "blk.15.attn_q_norm.weight", 15,
                 -1},
        NameCase{OL, "model.layers.15.mlp.gate.weight", P, "blk.15.ffn_gate_inp.weight", 15, -1},
        NameCase{OL, "model.layers.15.mlp.experts.63.up_proj.weight", E, "blk.15.ffn_up_exps", 15,
                 63}));

TEST(HfNameMappingNegative, UnusedOrForeignNamesAreNotMapped) {
  const std::pair<Arch, const char*> cases[] = {
      {Arch::kLlama, "model.layers.0.self_attn.rotary_emb.inv_freq"},
      {Arch::kLlama, "model.layers.0.mlp.gate.weight"},  // no router in a dense model
      {Arch::kLlama, "model.layers.0.mlp.experts.0.gate_proj.weight"},
      {Arch::kQwen2Moe, "model.layers.0.block_sparse_moe.experts.0.w1.weight"},
      {Arch::kQwen3Moe, "model.layers.0.mlp.shared_expert.gate_proj.weight"},
      {Arch::kMixtral, "model.layers.0.mlp.gate_proj.weight"},  // Mixtral has no dense MLP
      {Arch::kMixtral, "model.layers.0.block_sparse_moe.experts.0.gate_proj.weight"},
      {Arch::kLlama, "model.layers.x.input_layernorm.weight"},
      {Arch::kLlama, "model.layers.-1.input_layernorm.weight"},
      {Arch::kLlama, "model.layers.01.input_layernorm.weight"},
      {Arch::kLlama, "model.layers.99999999999.input_layernorm.weight"},
      {Arch::kLlama, "model.layers.0"},
      {Arch::kLlama, "model.layers.0."},
      {Arch::kLlama, ""},
      {Arch::kLlama, "model.embed_tokens.weight.extra"},
      {Arch::kQwen3Moe, "model.layers.1.mlp.experts.x.up_proj.weight"},
      {Arch::kQwen3Moe, "model.layers.1.mlp.experts.2.w1.weight"},
  };
  for (const auto& [arch, name] : cases) {
    EXPECT_FALSE(MapHfTensorName(arch, name).has_value()) << ArchName(arch) << " " << name;
  }
}

TEST(HfNameForCanonical, ReverseMapping) {
  EXPECT_EQ(HfNameForCanonical(Arch::kLlama, "token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(HfNameForCanonical(Arch::kLlama, "output.weight"), "lm_head.weight");
  EXPECT_EQ(HfNameForCanonical(Arch::kQwen2, "blk.7.attn_k.bias"),
            "model.layers.7.self_attn.k_proj.bias");
  EXPECT_EQ(HfNameForCanonical(Arch::kMixtral, "blk.1.ffn_gate_inp.weight"),
            "model.layers.1.block_sparse_moe.gate.weight");
  EXPECT_EQ(HfNameForCanonical(Arch::kMixtral, "blk.1.ffn_down_exps", 3),
            "model.layers.1.block_sparse_moe.experts.3.w2.weight");
  EXPECT_EQ(HfNameForCanonical(Arch::kOlmoe, "blk.1.ffn_up_exps.weight", 2),
            "model.layers.1.mlp.experts.2.up_proj.weight");
  EXPECT_EQ(HfNameForCanonical(Arch::kQwen2Moe, "blk.0.ffn_gate_inp_shexp.weight"),
            "model.layers.0.mlp.shared_expert_gate.weight");
  EXPECT_EQ(HfNameForCanonical(Arch::kQwen3Moe, "blk.0.ffn_gate_exps"),
            "model.layers.0.mlp.experts.*.gate_proj.weight");
  EXPECT_EQ(HfNameForCanonical(Arch::kLlama, "blk.0.ffn_gate_exps", 0), "");
  EXPECT_EQ(HfNameForCanonical(Arch::kLlama, "nonsense"), "");
  EXPECT_EQ(ExpertBase(3, "up"), "blk.3.ffn_up_exps");
}

// Every canonical name that maps back maps forward to itself.
TEST(HfNameForCanonical, InvertsMapHfTensorName) {
  for (Arch a : {Arch::kLlama, Arch::kQwen2, Arch::kMixtral, Arch::kQwen2Moe, Arch::kQwen3Moe,
                 Arch::kOlmoe}) {
    for (const char* c :
         {"blk.2.attn_norm.weight", "blk.2.attn_q.weight", "blk.2.attn_q.bias",
          "blk.2.attn_output.weight", "blk.2.attn_k_norm.weight", "blk.2.ffn_norm.weight",
          "blk.2.ffn_gate.weight", "blk.2.ffn_down.weight", "blk.2.ffn_gate_inp.weight",
          "blk.2.ffn_up_shexp.weight", "token_embd.weight", "output_norm.weight"}) {
      const std::string hf = HfNameForCanonical(a, c);
      if (hf.empty()) continue;
      const auto ref = MapHfTensorName(a, hf);
      ASSERT_TRUE(ref.has_value()) << ArchName(a) << " " << hf;
      EXPECT_EQ(ref->canonical, c);
    }
  }
}

}  // namespace
}  // namespace tandem
