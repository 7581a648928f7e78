#include "cli/override_tensor.h"

#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

ModelConfig Mixtral(int64_t layers) {
  ModelConfig c;
  c.arch = Arch::kMixtral;
  c.num_layers = layers;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  return c;
}

std::string Resolve(const std::vector<std::string>& rules, const ModelConfig& c) {
  absl::StatusOr<std::string> s = CpuExpertsFromOverrides(rules, c);
  return s.ok() ? *s : "error: " + std::string(s.status().message());
}

TEST(OverrideTensor, LlamaCppRulesPlaceWholeLayersOfExperts) {
  const ModelConfig c = Mixtral(4);
  EXPECT_EQ(Resolve({"exps=CPU"}, c), "all");
  EXPECT_EQ(Resolve({".ffn_.*_exps.=CPU"}, c), "all");
  EXPECT_EQ(Resolve({"blk\\.(1|2)\\.ffn_.*_exps=CPU"}, c), "0,8,8,0");
  // The first matching rule wins, across values and within one.
  EXPECT_EQ(Resolve({"blk\\.3\\.ffn=CUDA0,exps=CPU"}, c), "8,8,8,0");
  EXPECT_EQ(Resolve({"blk\\.0\\.=GPU", "exps=CPU"}, c), "0,8,8,8");
  EXPECT_EQ(Resolve({"exps=CUDA1"}, c), "none");
}

TEST(OverrideTensor, OnlyTheMoeLayersOfAMixedModel) {
  ModelConfig c = Mixtral(4);
  c.arch = Arch::kQwen2Moe;
  c.decoder_sparse_step = 2;  // layers 1 and 3 have experts
  EXPECT_EQ(Resolve({"blk\\.(1|2)\\.=CPU", "exps=GPU"}, c), "0,8,0,0");
  EXPECT_EQ(Resolve({"exps=CPU"}, c), "all");
}

TEST(OverrideTensor, RulesThatCannotBeFollowedAreErrors) {
  const ModelConfig c = Mixtral(4);
  for (const auto& [rules, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"exps"}, "expected REGEX=BUFFER"},
           {{"=CPU"}, "expected REGEX=BUFFER"},
           {{"exps=RAM"}, "the buffer must be CPU or a GPU"},
           {{"exps=CUDA"}, "the buffer must be CPU or a GPU"},
           {{"(exps=CPU"}, "not a regular expression"},
           {{"ffn_up_exps=CPU"}, "must go to one place"},
           {{"attn_q=CPU"}, "decides no routed-expert tensor"},
           {{"exps=CPU,blk\\.1\\.=GPU"}, "decides no routed-expert tensor"},
       }) {
    const std::string got = Resolve(rules, c);
    EXPECT_NE(got.find(want), std::string::npos) << rules[0] << ": " << got;
    EXPECT_EQ(got.rfind("error: --override-tensor", 0), 0u) << got;
  }
  ModelConfig dense = c;
  dense.num_experts = 0;
  EXPECT_NE(Resolve({"exps=CPU"}, dense).find("no routed experts"), std::string::npos);
}

}  // namespace
}  // namespace tandem::cli
