#include "coordinator/planner/cost/model_cost.h"

#include <cmath>

#include "coordinator/planner/cost/workload.h"
#include "coordinator/planner/testing/planner_test_models.h"
#include "gtest/gtest.h"

namespace tandem::planner {
namespace {

using testing::Llama2_70B;
using testing::Mixtral8x7B;

const OpCost& Find(const std::vector<OpCost>& ops, OpKind kind) {
  for (const OpCost& o : ops) {
    if (o.kind == kind) return o;
  }
  static const OpCost kNone;
  ADD_FAILURE() << "no op " << OpKindName(kind);
  return kNone;
}

TEST(ModelCostTest, ParameterCountsMatchThePublishedModels) {
  // Mixtral-8x7B: embeddings 2 x 32000 x 4096 = 262.1M; per layer attention
  // 4096 x (4096 + 2 x 1024) + 4096^2 = 41.9M, experts 8 x 3 x 4096 x 14336 =
  // 1409.3M, router 32.8K, norms 8K: 1451.3M x 32 = 46.44B; total 46.70B.
  absl::StatusOr<ModelCost> m = ModelCost::Create(Mixtral8x7B());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR(static_cast<double>(m->total_params()), 46.70e9, 0.01e9);
  EXPECT_DOUBLE_EQ(m->expert_bytes(), 2.0 * 3 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(m->kv_bytes_per_token_layer(), 2.0 * 1024 * 2);
  // LLaMA-2-70B: 524.3M embeddings + 80 x (151.0M attention + 704.6M MLP).
  absl::StatusOr<ModelCost> l = ModelCost::Create(Llama2_70B());
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NEAR(static_cast<double>(l->total_params()), 68.98e9, 0.01e9);
  EXPECT_DOUBLE_EQ(l->dense_mlp_bytes(), 2.0 * 3 * 8192 * 28672);
  EXPECT_EQ(l->expert_bytes(), 0);
}

TEST(ModelCostTest, DecodeLayerOfMixtral) {
  absl::StatusOr<ModelCost> m = ModelCost::Create(Mixtral8x7B());
  ASSERT_TRUE(m.ok());
  // 16 sequences at context 512.
  std::vector<OpCost> ops = m->DecodeLayer(0, 16, 512);
  const OpCost& qkv = Find(ops, OpKind::kQkvProjection);
  EXPECT_DOUBLE_EQ(qkv.flops, 2.0 * 16 * 4096 * 6144);
  EXPECT_DOUBLE_EQ(qkv.weight_bytes, 2.0 * 4096 * 6144);
  const OpCost& att = Find(ops, OpKind::kAttentionCore);
  // 4 FLOPs per (query head dim, key): 4 x 4096 x 16 x 512.
  EXPECT_DOUBLE_EQ(att.flops, 4.0 * 4096 * 16 * 512);
  EXPECT_DOUBLE_EQ(att.kv_read_bytes, 16.0 * 512 * 4096);
  // Intensity of decode attention against its KV: 4·q_dim / (2·kv_dim·2 B)
  // = 2·(q heads / kv heads) / bytes per element = 4 FLOP/B (MoE-Lightning §2.4).
  EXPECT_DOUBLE_EQ(att.flops / att.kv_read_bytes, 4.0);
  const OpCost& experts = Find(ops, OpKind::kRoutedExperts);
  EXPECT_DOUBLE_EQ(experts.flops, 16.0 * 2 * 2 * 3 * 4096 * 14336);
  // 16 tokens choosing 2 of 8: 8 (1 - (3/4)^16) = 7.92 experts read.
  EXPECT_NEAR(experts.weight_bytes / m->expert_bytes(), 8 * (1 - std::pow(0.75, 16)), 1e-12);
  EXPECT_NEAR(m->ExpectedActiveExperts(1), 2.0, 1e-12);
  // Batch of one reads 2 experts: weight bytes of the layer are dominated by them.
  const OpCost one = ModelCost::Sum(m->DecodeLayer(0, 1, 100));
  EXPECT_NEAR(one.weight_bytes, m->attention_weight_bytes() + 2 * m->expert_bytes() +
                                    m->router_bytes() + 2 * 4096 * 2.0,
              1.0);
}

TEST(ModelCostTest, PrefillIsCausal) {
  absl::StatusOr<ModelCost> l = ModelCost::Create(Llama2_70B());
  ASSERT_TRUE(l.ok());
  // 2 prompts of 4 tokens: 2 x (1 + 2 + 3 + 4) = 20 query-key pairs.
  const OpCost& att = Find(l->PrefillLayer(3, 2, 4), OpKind::kAttentionCore);
  EXPECT_DOUBLE_EQ(att.flops, 4.0 * 8192 * 20);
  const OpCost& mlp = Find(l->PrefillLayer(3, 2, 4), OpKind::kDenseMlp);
  EXPECT_DOUBLE_EQ(mlp.flops, 8.0 * 2 * 3 * 8192 * 28672);
  EXPECT_DOUBLE_EQ(mlp.weight_bytes, l->dense_mlp_bytes());
}

TEST(ModelCostTest, BadInputIsAnError) {
  ModelConfig c = Mixtral8x7B();
  c.num_kv_heads = 5;  // does not divide 32 heads
  EXPECT_FALSE(ModelCost::Create(c).ok());
  CostOptions o;
  o.kv_bytes_per_element = 0;
  EXPECT_FALSE(ModelCost::Create(Mixtral8x7B(), o).ok());
  Workload w{.prompt_len = 10, .max_prompt_len = 5, .gen_len = 3};
  EXPECT_FALSE(w.Validate().ok());
  w.max_prompt_len = 0;
  EXPECT_TRUE(w.Validate().ok());
  w.objective = Objective::kThroughputUnderItlSlo;
  EXPECT_FALSE(w.Validate().ok());  // no SLO given
  w.slo_itl_s = 0.1;
  EXPECT_TRUE(w.Validate().ok());
}

// The shapes written out in planner_test_models.cc are those of the shipped
// config.json files.
TEST(ModelCostTest, TestModelsMatchTheShippedConfigs) {
  const struct {
    const char* file;
    ModelConfig config;
  } kCases[] = {{"mixtral-8x7b", testing::Mixtral8x7B()},
                {"mixtral-8x22b", testing::Mixtral8x22B()},
                {"llama-2-7b", testing::Llama2_7B()},
                {"llama-2-70b", testing::Llama2_70B()}};
  for (const auto& k : kCases) {
    SCOPED_TRACE(k.file);
    absl::StatusOr<ModelConfig> shipped = testing::ShippedModel(k.file);
    ASSERT_TRUE(shipped.ok()) << shipped.status();
    const ModelConfig& a = k.config;
    const ModelConfig& b = *shipped;
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.arch_name, b.arch_name);
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.intermediate_size, b.intermediate_size);
    EXPECT_EQ(a.num_layers, b.num_layers);
    EXPECT_EQ(a.num_heads, b.num_heads);
    EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.max_position, b.max_position);
    EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.num_experts, b.num_experts);
    EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
    EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
    EXPECT_EQ(a.shared_expert_intermediate_size,
              b.shared_expert_intermediate_size);
  }
}

}  // namespace
}  // namespace tandem::planner
