#include "gpu_worker/bench/synthetic_model.h"

#include <filesystem>

#include "common/checkpoint.h"
#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

SyntheticModelSpec Tiny(bool moe, DType dtype) {
  SyntheticModelSpec s = moe ? MoeSpec() : DenseSpec();
  s.hidden_size = 64;
  s.num_layers = 2;
  s.intermediate_size = 96;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.vocab_size = 128;
  s.dtype = dtype;
  return s;
}

TEST(SyntheticModelTest, DefaultsAreTheAdvertisedShapes) {
  auto dense = SyntheticConfig(DenseSpec());
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->arch, Arch::kLlama);
  EXPECT_EQ(dense->head_dim, 128);
  auto moe = SyntheticConfig(MoeSpec());
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_EQ(moe->arch, Arch::kMixtral);
  EXPECT_EQ(moe->num_experts, 8);
  EXPECT_EQ(moe->num_experts_per_tok, 2);
  EXPECT_EQ(moe->moe_intermediate_size, 2816);
}

TEST(SyntheticModelTest, RejectsBadShapes) {
  SyntheticModelSpec s = Tiny(false, DType::kBF16);
  s.num_heads = 5;
  EXPECT_FALSE(SyntheticConfig(s).ok());
  s = Tiny(false, DType::kQ8_0);
  s.intermediate_size = 100;  // not a whole number of 32-element blocks
  EXPECT_FALSE(SyntheticConfig(s).ok());
  s = Tiny(false, DType::kQ4_1);  // not one of the synthetic dtypes
  EXPECT_FALSE(SyntheticConfig(s).ok());
}

TEST(SyntheticModelTest, EveryDtypeOpensAndTheDirectoryIsRemoved) {
  std::string where;
  for (bool moe : {false, true}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + (moe ? " moe" : " dense"));
      auto dir = ScratchDir::Create("synthetic_model_test");
      ASSERT_TRUE(dir.ok()) << dir.status();
      where = dir->path();
      auto path = WriteSyntheticModel(Tiny(moe, dt), dir->path());
      ASSERT_TRUE(path.ok()) << path.status();
      auto ckpt = Checkpoint::Open(*path);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status();
      EXPECT_EQ((*ckpt)->config().hidden_size, 64);
      EXPECT_EQ((*ckpt)->config().num_experts, moe ? 8 : 0);
      EXPECT_EQ((*ckpt)->format(),
                DTypeIsQuantized(dt) ? CheckpointFormat::kGguf : CheckpointFormat::kHfDirectory);
      auto q = (*ckpt)->Tensor("blk.0.attn_q.weight");
      ASSERT_TRUE(q.ok());
      EXPECT_EQ(q->dtype, dt);
    }
    EXPECT_FALSE(std::filesystem::exists(where));
  }
}

}  // namespace
}  // namespace tandem::bench
