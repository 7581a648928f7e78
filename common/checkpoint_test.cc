#include "common/checkpoint.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/gguf.h"
#include "common/hf_checkpoint.h"
#include "common/quant.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/tiny_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace tt = tandem::testing;
using tt::TestTensor;

constexpr Arch kAllArchs[] = {Arch::kLlama,    Arch::kQwen2,    Arch::kMixtral,
                              Arch::kQwen2Moe, Arch::kQwen3Moe, Arch::kOlmoe};

std::vector<float> Values(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  ConvertToF32(v.dtype, v.data, v.numel(), out.data());
  return out;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The fields a checkpoint must reproduce from its config (rope_style and
// arch_name are format-specific and checked separately).
void ExpectSameConfig(const ModelConfig& got, const ModelConfig& want) {
  EXPECT_EQ(got.arch, want.arch);
  EXPECT_EQ(got.vocab_size, want.vocab_size);
  EXPECT_EQ(got.hidden_size, want.hidden_size);
  EXPECT_EQ(got.intermediate_size, want.intermediate_size);
  EXPECT_EQ(got.num_layers, want.num_layers);
  EXPECT_EQ(got.num_heads, want.num_heads);
  EXPECT_EQ(got.num_kv_heads, want.num_kv_heads);
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.max_position, want.max_position);
  EXPECT_FLOAT_EQ(got.rms_norm_eps, want.rms_norm_eps);
  EXPECT_FLOAT_EQ(got.rope_theta, want.rope_theta);
  EXPECT_EQ(got.rope_scaling.type, want.rope_scaling.type);
  EXPECT_EQ(got.tie_word_embeddings, want.tie_word_embeddings);
  EXPECT_EQ(got.qkv_bias, want.qkv_bias);
  EXPECT_EQ(got.attn_output_bias, want.attn_output_bias);
  EXPECT_EQ(got.qk_norm, want.qk_norm);
  EXPECT_EQ(got.num_experts, want.num_experts);
  EXPECT_EQ(got.num_experts_per_tok, want.num_experts_per_tok);
  EXPECT_EQ(got.moe_intermediate_size, want.moe_intermediate_size);
  EXPECT_EQ(got.shared_expert_intermediate_size, want.shared_expert_intermediate_size);
  EXPECT_EQ(got.norm_topk_prob, want.norm_topk_prob);
  EXPECT_EQ(got.mlp_only_layers, want.mlp_only_layers);
  EXPECT_EQ(got.decoder_sparse_step, want.decoder_sparse_step);
  EXPECT_EQ(got.bos_token_id, want.bos_token_id);
  EXPECT_EQ(got.eos_token_ids, want.eos_token_ids);
  for (int64_t l = 0; l < want.num_layers; ++l) EXPECT_EQ(got.IsMoeLayer(l), want.IsMoeLayer(l));
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tt::MakeTempDir("checkpoint_test"); }
  void TearDown() override { tt::RemoveTree(dir_); }
  std::string dir_;
};

// ---- Hugging Face directories ----

class HfRoundTrip : public CheckpointTest, public ::testing::WithParamInterface<Arch> {};

TEST_P(HfRoundTrip, ConfigAndEveryTensor) {
  const ModelConfig want = tt::TinyConfig(GetParam());
  const std::vector<TestTensor> canonical = tt::MakeCanonicalTensors(want, 11);
  ASSERT_TRUE(
      tt::WriteHfDirectory(dir_, tt::HfConfigJson(want), tt::ToHfTensors(want, canonical)).ok());
  auto ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const Checkpoint& c = **ck;
  EXPECT_EQ(c.format(), CheckpointFormat::kHfDirectory);
  EXPECT_EQ(c.path(), dir_);
  EXPECT_EQ(c.gguf(), nullptr);
  ExpectSameConfig(c.config(), want);
  EXPECT_EQ(c.config().arch_name, std::string(ArchName(GetParam())));
  EXPECT_EQ(c.config().rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c.HasTensor("output.weight"), !want.tie_word_embeddings);
  for (const TestTensor& t : canonical) {
    // What BF16 storage keeps of the canonical values.
    const std::vector<float> expect =
        TestTensor::FromF32(t.name, t.shape, t.ToF32(), DType::kBF16).ToF32();
    if (EndsWith(t.name, "_exps.weight")) {
      const std::string base = t.name.substr(0, t.name.size() - 7);
      const int64_t per = t.shape[1] * t.shape[2];
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        auto v = c.ExpertTensor(base, e);
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(v->shape, (std::vector<int64_t>{t.shape[1], t.shape[2]}));
        EXPECT_EQ(v->dtype, DType::kBF16);
        EXPECT_EQ(Values(*v),
                  std::vector<float>(expect.begin() + e * per, expect.begin() + (e + 1) * per))
            << base << " expert " << e;
      }
      EXPECT_FALSE(c.ExpertTensor(base, t.shape[0]).ok());
      EXPECT_FALSE(c.ExpertTensor(base, -1).ok());
    } else {
      ASSERT_TRUE(c.HasTensor(t.name)) << t.name;
      auto v = c.Tensor(t.name);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->name, t.name);
      EXPECT_EQ(v->shape, t.shape) << t.name;
      EXPECT_EQ(v->dtype, DType::kBF16);
      EXPECT_EQ(v->nbytes, v->numel() * 2);
      EXPECT_EQ(Values(*v), expect) << t.name;
    }
  }
  EXPECT_FALSE(c.HasTensor("blk.99.attn_q.weight"));
  auto missing = c.Tensor("blk.0.nonsense.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("blk.0.nonsense.weight"));
}

INSTANTIATE_TEST_SUITE_P(AllArchs, HfRoundTrip, ::testing::ValuesIn(kAllArchs),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

TEST_F(CheckpointTest, HfShardedWithIndex) {
  const ModelConfig want = tt::TinyConfig(Arch::kMixtral);
  tt::HfDirOptions o;
  o.num_shards = 3;
  ASSERT_TRUE(tt::WriteTinyHfModel(dir_, want, 5, {}, o).ok());
  auto hf = HfCheckpoint::Open(dir_);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ((*hf)->files().size(), 3u);
  ExpectSameConfig((*hf)->config(), want);
  // Views point into the shards' mappings: nothing is copied.
  auto v = (*hf)->Tensor("blk.1.attn_q.weight");
  ASSERT_TRUE(v.ok());
  bool found = false;
  for (const auto& f : (*hf)->files()) {
    if (const SafetensorsTensor* t = f->Find("model.layers.1.self_attn.q_proj.weight")) {
      EXPECT_EQ(f->View(*t).data, v->data);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(CheckpointTest, HfPlainDTypes) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    const std::string dir = dir_ + "/" + std::string(DTypeName(dt));
    const ModelConfig want = tt::TinyConfig(Arch::kQwen2);
    tt::HfTensorOptions o;
    o.dtype = dt;
    ASSERT_TRUE(tt::WriteTinyHfModel(dir, want, 3, o).ok());
    auto ck = Checkpoint::Open(dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_EQ((*ck)->Tensor("blk.0.attn_q.bias")->dtype, dt);
    EXPECT_EQ((*ck)->Tensor("token_embd.weight")->dtype, dt);
  }
}

TEST_F(CheckpointTest, HfFusedExpertsOfTransformersV5) {
  for (Arch arch : {Arch::kMixtral, Arch::kQwen2Moe, Arch::kQwen3Moe, Arch::kOlmoe}) {
    SCOPED_TRACE(std::string(ArchName(arch)));
    const std::string dir = dir_ + "/" + std::string(ArchName(arch));
    const ModelConfig want = tt::TinyConfig(arch);
    const auto canonical = tt::MakeCanonicalTensors(want, 9);
    tt::HfTensorOptions o;
    o.dtype = DType::kF32;
    o.fused_experts = true;
    const auto hf = tt::ToHfTensors(want, canonical, o);
    bool has_fused = false;
    for (const auto& t : hf) has_fused |= EndsWith(t.name, "experts.gate_up_proj");
    ASSERT_TRUE(has_fused);
    ASSERT_TRUE(tt::WriteHfDirectory(dir, tt::HfConfigJson(want), hf).ok());
    auto ck = Checkpoint::Open(dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    for (const TestTensor& t : canonical) {
      if (!EndsWith(t.name, "_exps.weight")) continue;
      const std::vector<float> all = t.ToF32();
      const int64_t per = t.shape[1] * t.shape[2];
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        auto v = (*ck)->ExpertTensor(t.name, e);  // ".weight" suffix accepted too
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(v->shape, (std::vector<int64_t>{t.shape[1], t.shape[2]}));
        EXPECT_EQ(Values(*v),
                  std::vector<float>(all.begin() + e * per, all.begin() + (e + 1) * per))
            << t.name << " expert " << e;
      }
    }
  }
}

TEST_F(CheckpointTest, HfTiedEmbeddingsHideLmHead) {
  const ModelConfig want = tt::TinyConfig(Arch::kLlama);
  ASSERT_TRUE(want.tie_word_embeddings);
  auto hf = tt::ToHfTensors(want, tt::MakeCanonicalTensors(want, 1));
  // Some checkpoints store lm_head even when tied; the config decides.
  hf.push_back(TestTensor::FromF32("lm_head.weight", {want.vocab_size, want.hidden_size},
                                   tt::RandomValues(want.vocab_size * want.hidden_size, 2),
                                   DType::kBF16));
  ASSERT_TRUE(tt::WriteHfDirectory(dir_, tt::HfConfigJson(want), hf).ok());
  auto ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_TRUE((*ck)->config().tie_word_embeddings);
  EXPECT_FALSE((*ck)->HasTensor("output.weight"));
  auto out = (*ck)->Tensor("output.weight");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("tied"));
  EXPECT_TRUE((*ck)->HasTensor("token_embd.weight"));
}

TEST_F(CheckpointTest, HfGenerationConfigAndTokenizerFiles) {
  ModelConfig want = tt::TinyConfig(Arch::kQwen2);
  want.eos_token_ids = {2};
  tt::HfDirOptions o;
  o.generation_config =
      nlohmann::json{{"temperature", 0.6},       {"top_p", 0.95},          {"top_k", 20},
                     {"do_sample", true},        {"eos_token_id", {2, 7}}, {"bos_token_id", 1},
                     {"repetition_penalty", 1.1}};
  o.write_tokenizer_files = true;
  ASSERT_TRUE(tt::WriteTinyHfModel(dir_, want, 1, {}, o).ok());
  auto ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const GenerationDefaults& g = (*ck)->generation_defaults();
  EXPECT_FLOAT_EQ(g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(g.top_p, 0.95f);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_TRUE(g.do_sample);
  EXPECT_THAT((*ck)->config().eos_token_ids, ElementsAre(2, 7));
  EXPECT_EQ((*ck)->tokenizer_json_path(), dir_ + "/tokenizer.json");
  EXPECT_EQ((*ck)->tokenizer_config_path(), dir_ + "/tokenizer_config.json");
}

TEST_F(CheckpointTest, HfEosFromGenerationConfigWhenConfigHasNone) {
  ModelConfig want = tt::TinyConfig(Arch::kQwen2);
  want.eos_token_ids.clear();
  tt::HfDirOptions o;
  o.generation_config = nlohmann::json{{"eos_token_id", 5}};
  ASSERT_TRUE(tt::WriteTinyHfModel(dir_, want, 1, {}, o).ok());
  auto ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_THAT((*ck)->config().eos_token_ids, ElementsAre(5));
  const GenerationDefaults& g = (*ck)->generation_defaults();
  EXPECT_FLOAT_EQ(g.temperature, 1.0f);
  EXPECT_FALSE(g.do_sample);
  EXPECT_EQ((*ck)->tokenizer_json_path(), "");
  EXPECT_EQ((*ck)->tokenizer_config_path(), "");
}

TEST_F(CheckpointTest, FilesOfAnHfDirectoryOpenTheDirectory) {
  ASSERT_TRUE(tt::WriteTinyHfModel(dir_, tt::TinyConfig(Arch::kOlmoe), 1).ok());
  for (const char* f : {"/config.json", "/model.safetensors", "/"}) {
    auto ck = Checkpoint::Open(dir_ + f);
    ASSERT_TRUE(ck.ok()) << f << ": " << ck.status();
    EXPECT_EQ((*ck)->format(), CheckpointFormat::kHfDirectory);
    EXPECT_EQ((*ck)->path(), dir_);
  }
}

TEST_F(CheckpointTest, MissingPathIsNotFound) {
  auto ck = Checkpoint::Open(dir_ + "/nope.gguf");
  EXPECT_EQ(ck.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ck.status().message()), HasSubstr(dir_ + "/nope.gguf"));
}

// ---- GGUF ----

class GgufRoundTrip : public CheckpointTest, public ::testing::WithParamInterface<Arch> {};

TEST_P(GgufRoundTrip, ConfigAndEveryTensor) {
  const ModelConfig want = tt::TinyConfig(GetParam());
  const auto gguf_tensors = tt::ToGgufTensors(want, tt::MakeCanonicalTensors(want, 4));
  const std::string p = dir_ + "/m.gguf";
  ASSERT_TRUE(tt::WriteGguf(p, tt::GgufMetadataFor(want), gguf_tensors).ok());
  auto ck = Checkpoint::Open(p);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const Checkpoint& c = **ck;
  EXPECT_EQ(c.format(), CheckpointFormat::kGguf);
  EXPECT_EQ(c.path(), p);
  ASSERT_NE(c.gguf(), nullptr);
  ExpectSameConfig(c.config(), want);
  const bool llama_arch = GetParam() == Arch::kLlama || GetParam() == Arch::kMixtral;
  EXPECT_EQ(c.config().rope_style, llama_arch ? RopeStyle::kInterleaved : RopeStyle::kNeox);
  EXPECT_EQ(c.HasTensor("output.weight"), !want.tie_word_embeddings);
  for (const TestTensor& t : gguf_tensors) {
    if (EndsWith(t.name, "_exps.weight")) {
      const int64_t per = static_cast<int64_t>(t.bytes.size()) / t.shape[0];
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        auto v = c.ExpertTensor(t.name.substr(0, t.name.size() - 7), e);
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(v->shape, (std::vector<int64_t>{t.shape[1], t.shape[2]}));
        EXPECT_EQ(v->dtype, t.dtype);
        ASSERT_EQ(v->nbytes, per);
        EXPECT_EQ(std::memcmp(v->data, t.bytes.data() + e * per, static_cast<size_t>(per)), 0);
      }
      continue;
    }
    auto v = c.Tensor(t.name);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->dtype, t.dtype) << t.name;
    if (EndsWith(t.name, "ffn_gate_inp_shexp.weight")) {
      EXPECT_EQ(v->shape, (std::vector<int64_t>{1, want.hidden_size}));
    } else {
      EXPECT_EQ(v->shape, t.shape) << t.name;
    }
    ASSERT_EQ(v->nbytes, static_cast<int64_t>(t.bytes.size()));
    EXPECT_EQ(std::memcmp(v->data, t.bytes.data(), t.bytes.size()), 0) << t.name;
    // Zero copy: the view is the GgufFile's view of the mapping.
    EXPECT_EQ(v->data, c.gguf()->View(*c.gguf()->FindTensor(t.name)).data);
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchs, GgufRoundTrip, ::testing::ValuesIn(kAllArchs),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

TEST_F(CheckpointTest, GgufEveryMatrixDType) {
  for (DType dt :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    const ModelConfig want = tt::TinyConfig(Arch::kQwen3Moe);
    tt::GgufTensorOptions o;
    o.matrix_dtype = dt;
    o.embedding_dtype = dt;
    const std::string p = dir_ + "/" + std::string(DTypeName(dt)) + ".gguf";
    ASSERT_TRUE(tt::WriteTinyGgufModel(p, want, 2, o).ok());
    auto ck = Checkpoint::Open(p);
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_EQ((*ck)->Tensor("token_embd.weight")->dtype, dt);
    EXPECT_EQ((*ck)->Tensor("blk.1.attn_output.weight")->dtype, dt);
    EXPECT_EQ((*ck)->Tensor("blk.1.attn_q_norm.weight")->dtype, DType::kF32);
    auto e = (*ck)->ExpertTensor("blk.1.ffn_down_exps", 3);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->dtype, dt);
    // Quantized slices still decode close to the original weights.
    const auto canonical = tt::MakeCanonicalTensors(want, 2);
    for (const auto& t : canonical) {
      if (t.name != "blk.1.ffn_down_exps.weight") continue;
      const std::vector<float> all = t.ToF32();
      const std::vector<float> got = Values(*e);
      const int64_t per = t.shape[1] * t.shape[2];
      for (int64_t i = 0; i < per; ++i) {
        EXPECT_NEAR(got[static_cast<size_t>(i)], all[static_cast<size_t>(3 * per + i)], 0.07);
      }
    }
  }
}

// The same weights written as HF and as GGUF read back the same, up to
// llama.cpp's q/k row permutation for llama-arch models.
TEST_F(CheckpointTest, GgufAndHfCarryTheSameWeights) {
  for (Arch arch : {Arch::kQwen2, Arch::kLlama}) {
    SCOPED_TRACE(std::string(ArchName(arch)));
    const ModelConfig want = tt::TinyConfig(arch);
    const auto canonical = tt::MakeCanonicalTensors(want, 21);
    const std::string hf_dir = dir_ + "/hf_" + std::string(ArchName(arch));
    const std::string gguf_path = dir_ + "/" + std::string(ArchName(arch)) + ".gguf";
    tt::HfTensorOptions ho;
    ho.dtype = DType::kF32;
    tt::GgufTensorOptions go;
    go.matrix_dtype = go.embedding_dtype = DType::kF32;
    ASSERT_TRUE(
        tt::WriteHfDirectory(hf_dir, tt::HfConfigJson(want), tt::ToHfTensors(want, canonical, ho))
            .ok());
    ASSERT_TRUE(
        tt::WriteGguf(gguf_path, tt::GgufMetadataFor(want), tt::ToGgufTensors(want, canonical, go))
            .ok());
    auto hf = Checkpoint::Open(hf_dir);
    auto gg = Checkpoint::Open(gguf_path);
    ASSERT_TRUE(hf.ok()) << hf.status();
    ASSERT_TRUE(gg.ok()) << gg.status();
    for (const char* name : {"token_embd.weight", "blk.1.attn_k.weight", "blk.0.attn_q.weight",
                             "blk.1.ffn_down.weight", "output_norm.weight"}) {
      std::vector<float> h = Values(*(*hf)->Tensor(name));
      const std::vector<float> g = Values(*(*gg)->Tensor(name));
      const std::string n = name;
      if (arch == Arch::kLlama &&
          (n.find("attn_q") != std::string::npos || n.find("attn_k") != std::string::npos)) {
        const int64_t heads =
            n.find("attn_q") != std::string::npos ? want.num_heads : want.num_kv_heads;
        h = tt::PermuteQkRows(h, heads, want.head_dim, want.hidden_size);
      }
      EXPECT_EQ(h, g) << name;
    }
  }
}

TEST_F(CheckpointTest, GgufDenseLayersOfQwenMoe) {
  const ModelConfig want = tt::TinyConfig(Arch::kQwen2Moe);
  ASSERT_THAT(want.mlp_only_layers, ElementsAre(1));
  const std::string p = dir_ + "/q.gguf";
  ASSERT_TRUE(tt::WriteTinyGgufModel(p, want, 3).ok());
  auto ck = Checkpoint::Open(p);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_THAT((*ck)->config().mlp_only_layers, ElementsAre(1));
  EXPECT_FALSE((*ck)->config().IsMoeLayer(1));
  EXPECT_TRUE((*ck)->HasTensor("blk.1.ffn_gate.weight"));
  EXPECT_FALSE((*ck)->HasTensor("blk.1.ffn_gate_inp.weight"));
  EXPECT_EQ((*ck)->Tensor("blk.0.ffn_gate_inp_shexp.weight")->shape,
            (std::vector<int64_t>{1, want.hidden_size}));
}

TEST_F(CheckpointTest, GgufLegacyPerExpertTensors) {
  const ModelConfig want = tt::TinyConfig(Arch::kMixtral);
  std::vector<TestTensor> split;
  for (const TestTensor& t : tt::ToGgufTensors(want, tt::MakeCanonicalTensors(want, 6))) {
    if (!EndsWith(t.name, "_exps.weight")) {
      split.push_back(t);
      continue;
    }
    // blk.N.ffn_gate_exps.weight -> blk.N.ffn_gate.E.weight
    const std::string stem = t.name.substr(0, t.name.size() - 12);
    const size_t per = t.bytes.size() / static_cast<size_t>(t.shape[0]);
    for (int64_t e = 0; e < t.shape[0]; ++e) {
      TestTensor s;
      s.name = stem + "." + std::to_string(e) + ".weight";
      s.dtype = t.dtype;
      s.shape = {t.shape[1], t.shape[2]};
      s.bytes = t.bytes.substr(static_cast<size_t>(e) * per, per);
      split.push_back(s);
    }
  }
  const std::string p = dir_ + "/legacy.gguf";
  ASSERT_TRUE(tt::WriteGguf(p, tt::GgufMetadataFor(want), split).ok());
  auto ck = Checkpoint::Open(p);
  ASSERT_TRUE(ck.ok()) << ck.status();
  auto v = (*ck)->ExpertTensor("blk.1.ffn_up_exps", 2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape, (std::vector<int64_t>{want.moe_intermediate_size, want.hidden_size}));
}

// The real default model, when the environment points at it.
TEST(SmolLM2Gguf, OpensWithTheExpectedConfig) {
  const char* path = std::getenv("TANDEM_SMOLLM2_GGUF");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set TANDEM_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf to run";
  }
  auto ck = Checkpoint::Open(path);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const ModelConfig& c = (*ck)->config();
  EXPECT_EQ((*ck)->format(), CheckpointFormat::kGguf);
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.arch_name, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.max_position, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_NEAR(c.rms_norm_eps, 1e-5f, 1e-9f);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.is_moe());
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  EXPECT_FALSE((*ck)->HasTensor("output.weight"));

  auto emb = (*ck)->Tensor("token_embd.weight");
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ((*ck)->Tensor("blk.0.attn_q.weight")->dtype, DType::kQ4_1);
  EXPECT_EQ((*ck)->Tensor("blk.0.attn_q.weight")->shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ((*ck)->Tensor("blk.29.attn_k.weight")->shape, (std::vector<int64_t>{192, 576}));
  EXPECT_EQ((*ck)->Tensor("blk.0.ffn_down.weight")->shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ((*ck)->Tensor("blk.0.attn_norm.weight")->dtype, DType::kF32);
  // A row of the embedding decodes to small finite numbers.
  std::vector<float> row(576);
  ConvertToF32(DType::kQ8_0, emb->data, 576, row.data());
  for (float x : row) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_LT(std::fabs(x), 10.0f);
  }
  const GgufValue* tokens = (*ck)->gguf()->Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array_size(), 49152u);
}

}  // namespace
}  // namespace tandem
