#include "gpu_worker/bench/model_costs.h"

#include "common/checkpoint.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/quant_packed.h"
#include "gpu_worker/bench/engine_bench.h"
#include "gpu_worker/bench/expert_usage.h"
#include "gpu_worker/bench/synthetic_model.h"
#include "gpu_worker/engine/engine.h"
#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

struct Loaded {
  ScratchDir dir;
  std::unique_ptr<Engine> engine;
};

Loaded Load(bool moe, DType dtype, ops::ComputeType compute = ops::ComputeType::kF32) {
  SyntheticModelSpec s = moe ? MoeSpec() : DenseSpec();
  s.hidden_size = 64;
  s.num_layers = 2;
  s.intermediate_size = 96;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.vocab_size = 128;
  s.dtype = dtype;
  auto dir = ScratchDir::Create("model_costs_test");
  TANDEM_CHECK(dir.ok());
  auto path = WriteSyntheticModel(s, dir->path());
  TANDEM_CHECK(path.ok());
  auto ckpt = Checkpoint::Open(*path);
  TANDEM_CHECK(ckpt.ok());
  EngineOptions eo;
  eo.compute = compute;
  auto engine = Engine::Create(std::move(*ckpt), eo);
  TANDEM_CHECK(engine.ok());
  return {std::move(*dir), std::move(*engine)};
}

TEST(ModelCostsTest, DenseCountsEveryMatrix) {
  Loaded m = Load(false, DType::kF32);
  auto c = ComputeModelCosts(m.engine->checkpoint(), m.engine->weights());
  ASSERT_TRUE(c.ok()) << c.status();
  // Per layer: q 64x64, k and v 32x64, o 64x64, MLP 3 x 96x64.
  const int64_t layer = 64 * 64 * 2 + 32 * 64 * 2 + 3 * 96 * 64;
  EXPECT_EQ(c->dense_params, 2 * layer);
  EXPECT_EQ(c->dense_bytes, 4 * 2 * layer);
  EXPECT_EQ(c->lm_head_params, 128 * 64);
  // + embeddings, lm head, 2 norms per layer and the final norm.
  EXPECT_EQ(c->total_params, 2 * layer + 2 * 128 * 64 + 2 * 2 * 64 + 64);
  EXPECT_EQ(c->total_weight_bytes, 4 * c->total_params);
  EXPECT_EQ(c->moe_layers, 0);
  EXPECT_EQ(c->kv_bytes_per_token, 2 * 2 * 32 * 4);
  EXPECT_EQ(c->weight_storage, "f32");

  const Work d = DecodeWork(*c, 2, 10, 0);
  EXPECT_DOUBLE_EQ(d.flops, 2.0 * 2 * (2 * layer + 128 * 64) + 2 * 10.0 * c->attn_flops_per_key);
  EXPECT_DOUBLE_EQ(d.bytes, 4.0 * (2 * layer + 128 * 64) + 2 * 10.0 * c->kv_bytes_per_token +
                                2.0 * c->embed_row_bytes);
}

TEST(ModelCostsTest, QuantizedBytesAreWhatTheKernelsRead) {
  // f32 compute dequantizes: the costs follow what the kernels read.
  Loaded f = Load(false, DType::kQ8_0);
  auto cf = ComputeModelCosts(f.engine->checkpoint(), f.engine->weights());
  ASSERT_TRUE(cf.ok());
  EXPECT_EQ(cf->weight_storage, "f32");
  EXPECT_EQ(cf->dense_bytes, 4 * cf->dense_params);
  EXPECT_LT(cf->total_weight_bytes, 2 * cf->total_params);  // Q8_0 in the file
  // Quantized compute reads the blocks: 34 bytes per 32 weights, each row
  // padded to 64 bytes where the host device packs them.
  Loaded q = Load(false, DType::kQ8_0, ops::ComputeType::kQuantized);
  auto cq = ComputeModelCosts(q.engine->checkpoint(), q.engine->weights());
  ASSERT_TRUE(cq.ok());
  EXPECT_EQ(cq->weight_storage, "q8_0");
  const bool packs = ops::internal::QuantPacksHere();
  int64_t want = 0;
  for (const LayerWeights& l : q.engine->weights().layers) {
    for (const ops::LinearWeight* w : {&l.q, &l.k, &l.v, &l.o, &l.mlp.gate, &l.mlp.up, &l.mlp.down}) {
      EXPECT_EQ(w->storage(), packs ? ops::WeightStorage::kQ8_0Packed : ops::WeightStorage::kQ8_0);
      want += w->rows() * (packs ? ops::internal::PackedQuantRowBytes(DType::kQ8_0, w->cols())
                                 : w->cols() / 32 * 34);
    }
  }
  EXPECT_EQ(cq->dense_bytes, want);
  if (!packs) EXPECT_EQ(cq->dense_bytes, cq->dense_params / 32 * 34);
}

TEST(ModelCostsTest, ExpertUsageSeesTheRoutedExperts) {
  Loaded m = Load(true, DType::kF32);
  auto c = ComputeModelCosts(m.engine->checkpoint(), m.engine->weights());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->moe_layers, 2);
  EXPECT_EQ(c->expert_params, 3 * 96 * 64);
  ExpertUsage usage(8);
  m.engine->SetExpertOffload(&usage);
  SequenceChunk one;
  one.tokens = {5};
  ASSERT_TRUE(m.engine->Step({one}).ok());
  // One token: exactly top-k experts in each MoE layer.
  EXPECT_EQ(usage.distinct(), 2 * 2);
  usage.Reset();
  SequenceChunk many;
  many.seq_id = 1;
  for (int i = 0; i < 64; ++i) many.tokens.push_back(3 + i);
  ASSERT_TRUE(m.engine->Step({many}).ok());
  EXPECT_GT(usage.distinct(), 4);
  EXPECT_LE(usage.distinct(), 2 * 8);
}

TEST(ModelCostsTest, ExpectedExpertsAndRoofline) {
  EXPECT_DOUBLE_EQ(ExpectedDistinctExperts(8, 2, 1), 2.0);
  EXPECT_NEAR(ExpectedDistinctExperts(8, 2, 1000), 8.0, 1e-9);
  EXPECT_DOUBLE_EQ(ExpectedDistinctExperts(0, 2, 4), 0.0);
  const Roofline mem = RooflineOf({1e9, 1e9}, 10, 1000);  // 0.1 s vs 1 ms
  EXPECT_STREQ(mem.bound(), "memory");
  EXPECT_DOUBLE_EQ(mem.seconds(), 0.1);
  const Roofline cmp = RooflineOf({1e12, 1e6}, 10, 100);
  EXPECT_STREQ(cmp.bound(), "compute");
  EXPECT_DOUBLE_EQ(cmp.seconds(), 10.0);
  // 4e11 of the 1e12 FLOPs in experts at a 50 GFLOP/s kernel: 6 s + 8 s.
  const Roofline split = RooflineOf({1e12, 1e6, 4e11}, 10, 100, 50);
  EXPECT_DOUBLE_EQ(split.compute_seconds, 14.0);
  // Without an expert peak the experts run at the figure's.
  EXPECT_DOUBLE_EQ(RooflineOf({1e12, 1e6, 4e11}, 10, 100).compute_seconds, 10.0);
}

TEST(EngineBenchTest, EngineOptionsHoldEverySequence) {
  EngineBenchOptions o;
  const EngineOptions e = EngineOptionsFor(o, ops::ComputeType::kBF16);
  EXPECT_GE(e.max_context, 512);
  EXPECT_GE(e.max_context, o.context + o.tg_tokens);
  // 32 sequences of 129 tokens (9 blocks each) fit in the pool.
  EXPECT_GE(e.max_sequences * (e.max_context / 16), 32 * 9);
  o.tg_tokens = 1;
  EXPECT_FALSE(ValidateEngineBenchOptions(o).ok());
}

}  // namespace
}  // namespace tandem::bench
