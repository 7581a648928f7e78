// The same weights give the same logits whatever the checkpoint format: a
// Hugging Face directory (rotate-half RoPE, per-expert tensors) and a GGUF file
// (llama.cpp's permuted q/k rows with interleaved RoPE for llama-arch models,
// stacked 3-D expert tensors), for every architecture. And quantized GGUF
// weights compute exactly as their dequantized values, f16 weights as
// their f32 values.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/tiny_models.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/rope.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/testing/separate_memory_device.h"
#include "gpu_worker/engine/testing/engine_test_util.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::GgufTensorOptions;
using testing::HfTensorOptions;

// `storage`, if given, receives how the engine holds the first layer's q
// projection, and `notice` its load notice; `available_memory` is
// EngineOptions::available_memory_bytes.
std::vector<float> AllLogits(const std::string& path,
                             const std::vector<int32_t>& prompt,
                             ops::ComputeType compute = ops::ComputeType::kF32,
                             ops::WeightStorage* storage = nullptr,
                             int64_t available_memory = -1,
                             std::string* notice = nullptr) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return {};
  EngineOptions o;
  o.max_context = 128;
  o.max_sequences = 1;
  o.compute = compute;
  o.available_memory_bytes = available_memory;
  auto engine = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  if (storage != nullptr) *storage = (*engine)->weights().layers[0].q.storage();
  if (notice != nullptr) *notice = (*engine)->load_notice();
  SequenceChunk chunk{0, prompt, 0, true};
  auto r = (*engine)->Step({chunk});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->logits : std::vector<float>{};
}

class EngineFormats : public ::testing::TestWithParam<Arch> {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("engine_formats");
    // Fresh each run; TANDEM_FORMATS_SEED replays the seed a failure printed.
    const char* replay = std::getenv("TANDEM_FORMATS_SEED");
    seed_ = replay != nullptr ? static_cast<uint32_t>(std::strtoul(replay, nullptr, 10))
                              : std::random_device{}();
    config_ = testing::TinyConfig(GetParam());
    canonical_ = testing::MakeCanonicalTensors(config_, seed_);
    std::mt19937 rng(seed_);
    for (int i = 0; i < 19; ++i) {
      prompt_.push_back(static_cast<int32_t>(rng() % config_.vocab_size));
    }
  }
  void TearDown() override { testing::RemoveTree(dir_); }

  std::string dir_;
  uint32_t seed_ = 0;
  ModelConfig config_;
  std::vector<testing::TestTensor> canonical_;
  std::vector<int32_t> prompt_;
};

TEST_P(EngineFormats, GgufAndHuggingFaceLayoutsAgree) {
  HfTensorOptions hf;
  hf.dtype = DType::kF32;
  const std::string hf_dir = dir_ + "/hf";
  ASSERT_TRUE(
      testing::WriteHfDirectory(hf_dir, testing::HfConfigJson(config_),
                                testing::ToHfTensors(config_, canonical_, hf))
          .ok());
  GgufTensorOptions gg;
  gg.matrix_dtype = DType::kF32;
  gg.embedding_dtype = DType::kF32;
  gg.permute_qk =
      config_.arch == Arch::kLlama || config_.arch == Arch::kMixtral;
  const std::string gguf = dir_ + "/model.gguf";
  ASSERT_TRUE(
      testing::WriteGguf(gguf, testing::GgufMetadataFor(config_),
                         testing::ToGgufTensors(config_, canonical_, gg))
          .ok());
  const auto a = AllLogits(hf_dir, prompt_);
  const auto b = AllLogits(gguf, prompt_);
  EXPECT_LT(testing::MaxRelativeError(b, a), 1e-5) << "seed " << seed_;
}

// Quantized GGUF weights compute as exactly their dequantized values.
TEST_P(EngineFormats, QuantizedGgufComputesAsDequantized) {
  for (DType q : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    GgufTensorOptions gq;
    gq.matrix_dtype = q;
    gq.embedding_dtype = q;
    auto quantized = testing::ToGgufTensors(config_, canonical_, gq);
    std::vector<testing::TestTensor> dequantized;
    for (const auto& t : quantized) {
      dequantized.push_back(
          testing::TestTensor::FromF32(t.name, t.shape, t.ToF32()));
    }
    const std::string qpath = dir_ + "/q.gguf", fpath = dir_ + "/f.gguf";
    ASSERT_TRUE(
        testing::WriteGguf(qpath, testing::GgufMetadataFor(config_), quantized)
            .ok());
    ASSERT_TRUE(testing::WriteGguf(fpath, testing::GgufMetadataFor(config_),
                                   dequantized)
                    .ok());
    EXPECT_LT(testing::MaxRelativeError(AllLogits(qpath, prompt_),
                                        AllLogits(fpath, prompt_)),
              1e-6)
        << DTypeName(q) << " seed " << seed_;
  }
}

// f16 weights, in a Hugging Face float16 directory and in a GGUF F16 file,
// compute as exactly their f32 values: in place, widened where they are
// used, where the CPU has AVX2 (else converted at load); only the order of
// f32 sums differs from the f32 checkpoint's. That difference reached
// 1.1-1.3e-5 of the largest logit in 3 of 150 seeds on qwen2_moe (whose
// shared expert's sigmoid gate and larger sums amplify it), so the bound is
// 5e-5; f16 bits read as bf16, or a wrong row, are off by 1e-2 and more.
TEST_P(EngineFormats, F16ComputesAsItsF32Values) {
  const auto widened = [](const std::vector<testing::TestTensor>& f16) {
    std::vector<testing::TestTensor> f32;
    for (const auto& t : f16) {
      f32.push_back(testing::TestTensor::FromF32(
          t.name, t.shape, t.ToF32(),
          t.dtype == DType::kF16 ? DType::kF32 : t.dtype));
    }
    return f32;
  };
  HfTensorOptions hf;
  hf.dtype = DType::kF16;
  const auto hf16 = testing::ToHfTensors(config_, canonical_, hf);
  GgufTensorOptions gg;
  gg.matrix_dtype = DType::kF16;
  gg.embedding_dtype = DType::kF16;
  gg.permute_qk =
      config_.arch == Arch::kLlama || config_.arch == Arch::kMixtral;
  const auto gg16 = testing::ToGgufTensors(config_, canonical_, gg);
  const std::string h16 = dir_ + "/h16", h32 = dir_ + "/h32";
  const std::string g16 = dir_ + "/g16.gguf", g32 = dir_ + "/g32.gguf";
  const nlohmann::json config = testing::HfConfigJson(config_);
  ASSERT_TRUE(testing::WriteHfDirectory(h16, config, hf16).ok());
  ASSERT_TRUE(testing::WriteHfDirectory(h32, config, widened(hf16)).ok());
  const testing::GgufMetadata meta = testing::GgufMetadataFor(config_);
  ASSERT_TRUE(testing::WriteGguf(g16, meta, gg16).ok());
  ASSERT_TRUE(testing::WriteGguf(g32, meta, widened(gg16)).ok());
  const bool in_place = ops::internal::F16WidenedInPlace();
  for (const auto& [f16_path, f32_path] :
       {std::pair{h16, h32}, std::pair{g16, g32}}) {
    ops::WeightStorage storage = ops::WeightStorage::kF32;
    const auto a = AllLogits(f16_path, prompt_, ops::ComputeType::kBF16, &storage);
    EXPECT_EQ(storage, in_place ? ops::WeightStorage::kF16
                                : ops::WeightStorage::kF32)
        << f16_path;
    const auto b = AllLogits(f32_path, prompt_);
    EXPECT_LT(testing::MaxRelativeError(a, b), 5e-5)
        << f16_path << " seed " << seed_;
  }
}

// The host device packs bf16 weights where the copies fit in the memory
// there is, and leaves them in place, saying so, where they would not. The
// two paths sum in other orders, and each layer rounds its activations to
// bf16, so a sum that lands on the other side of a rounding boundary moves
// an activation by 2^-8 and the layers after carry it: the logits differed
// by up to 1.1e-2 of the largest in 240 seeds and architectures (the
// golden tests hold each path within 2e-2 of transformers). A packed
// weight read as rows would be off by the size of the logits. A MoE model
// here routes every token to all its experts: top-k of k < experts is a
// step function of the router's logits, and a near-tie that the two sums'
// rounding settles differently sent a token to another expert in 2 of 933
// runs of this binary (0.12-0.15 off, olmoe and qwen2_moe); softmax over all the
// experts moves with its logits as the rest of the model does, and every
// expert's packed weights are read.
TEST_P(EngineFormats, Bf16WeightsPackOnlyWhereTheyFit) {
  HfTensorOptions hf;
  hf.dtype = DType::kBF16;
  ModelConfig every_expert = config_;
  every_expert.num_experts_per_tok = config_.num_experts;
  const std::string dir = dir_ + "/bf16";
  ASSERT_TRUE(testing::WriteHfDirectory(dir, testing::HfConfigJson(every_expert),
                                        testing::ToHfTensors(config_, canonical_, hf))
                  .ok());
  const bool packs = ops::internal::Bf16PacksHere();
  ops::WeightStorage storage = ops::WeightStorage::kF32;
  std::string notice = "unset";
  const auto packed = AllLogits(dir, prompt_, ops::ComputeType::kBF16, &storage,
                                int64_t{1} << 50, &notice);
  EXPECT_EQ(storage, packs ? ops::WeightStorage::kBF16Packed : ops::WeightStorage::kBF16);
  EXPECT_EQ(notice, "");
  const auto in_place = AllLogits(dir, prompt_, ops::ComputeType::kBF16, &storage,
                                  /*available_memory=*/1000, &notice);
  EXPECT_EQ(storage, ops::WeightStorage::kBF16);
  if (packs) {
    EXPECT_NE(notice.find("weights stay where the model file maps them"), std::string::npos)
        << notice;
  } else {
    EXPECT_EQ(notice, "") << "nothing to pack here, nothing to say";
  }
  EXPECT_LT(testing::MaxRelativeError(in_place, packed), 3e-2) << "seed " << seed_;
}

// ScheInfer's prefill tokens on the device (prefill_gpu_tokens) compute on
// a copy of the CC rows there, which a device without host memory runs only
// as f32 or bf16: GGUF blocks kept quantized are refused when the engine is
// made, with a message, not when a prefill reaches the device. The host
// device computes them where they lie and takes them.
TEST(EngineFormatsCc, QuantizedCcRowsAreRefusedForTheDeviceCopy) {
  for (Arch arch : {Arch::kLlama, Arch::kQwen2}) {
    const ModelConfig c = testing::TinyConfig(arch);
    SCOPED_TRACE(ArchName(arch));
    const std::string dir = testing::MakeTempDir("engine_formats_cc");
    GgufTensorOptions gq;
    gq.matrix_dtype = DType::kQ8_0;
    gq.embedding_dtype = DType::kQ8_0;
    const std::string path = dir + "/q8.gguf";
    ASSERT_TRUE(testing::WriteGguf(path, testing::GgufMetadataFor(c),
                                   testing::ToGgufTensors(
                                       c, testing::MakeCanonicalTensors(c, 7), gq))
                    .ok());
    for (bool separate : {false, true}) {
      auto ckpt = Checkpoint::Open(path);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status();
      EngineOptions o;
      o.max_context = 64;
      o.max_sequences = 1;
      o.compute = ops::ComputeType::kQuantized;
      o.cpu_ffn_rows.assign(static_cast<size_t>(c.num_layers), 32);
      o.prefill_gpu_tokens = 3;
      if (separate) {
        o.device = [] {
          return absl::StatusOr<std::unique_ptr<Device>>(
              std::make_unique<testing::SeparateMemoryDevice>());
        };
      }
      auto engine = Engine::Create(std::move(*ckpt), o);
      if (!separate) {
        EXPECT_TRUE(engine.ok()) << engine.status();
        continue;
      }
      ASSERT_FALSE(engine.ok());
      EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(std::string(engine.status().message()).find("GGUF blocks"), std::string::npos)
          << engine.status();
    }
    testing::RemoveTree(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, EngineFormats,
                         ::testing::Values(Arch::kLlama, Arch::kQwen2,
                                           Arch::kMixtral, Arch::kQwen2Moe,
                                           Arch::kQwen3Moe, Arch::kOlmoe),
                         [](const auto& info) {
                           return std::string(ArchName(info.param));
                         });

class EngineFormatsMoe : public EngineFormats {};

// Transformers' v5 fused expert tensors read as the per-expert ones.
TEST_P(EngineFormatsMoe, FusedExpertTensorsAgreeWithPerExpert) {
  HfTensorOptions per;
  per.dtype = DType::kF32;
  HfTensorOptions fused = per;
  fused.fused_experts = true;
  ASSERT_TRUE(
      testing::WriteHfDirectory(dir_ + "/a", testing::HfConfigJson(config_),
                                testing::ToHfTensors(config_, canonical_, per))
          .ok());
  ASSERT_TRUE(testing::WriteHfDirectory(
                  dir_ + "/b", testing::HfConfigJson(config_),
                  testing::ToHfTensors(config_, canonical_, fused))
                  .ok());
  EXPECT_LT(testing::MaxRelativeError(AllLogits(dir_ + "/b", prompt_),
                                      AllLogits(dir_ + "/a", prompt_)),
            1e-6);
}

INSTANTIATE_TEST_SUITE_P(MoeArchitectures, EngineFormatsMoe,
                         ::testing::Values(Arch::kMixtral, Arch::kQwen2Moe,
                                           Arch::kQwen3Moe, Arch::kOlmoe),
                         [](const auto& info) {
                           return std::string(ArchName(info.param));
                         });

// Llama-3.x GGUF files express llama3 RoPE scaling as a rope_freqs tensor of
// per-dimension frequency divisors (llama.cpp's convention) rather than
// metadata: the engine must compute the same logits as the HF config does.
TEST(EngineFormatsRope, Llama3RopeFreqsTensorEqualsHfRopeScaling) {
  const uint32_t seed = std::random_device{}();
  ModelConfig c = testing::TinyConfig(Arch::kLlama);
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_position = 16;
  const auto canonical = testing::MakeCanonicalTensors(c, seed);
  const std::string dir = testing::MakeTempDir("engine_rope");
  HfTensorOptions hf;
  hf.dtype = DType::kF32;
  ASSERT_TRUE(testing::WriteHfDirectory(dir + "/hf", testing::HfConfigJson(c),
                                        testing::ToHfTensors(c, canonical, hf))
                  .ok());
  // The GGUF has no scaling metadata, only the divisors.
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling{};
  const auto base =
      ops::RopeInvFreq(c.head_dim, c.rope_theta, plain.rope_scaling);
  const auto scaled =
      ops::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling);
  std::vector<float> divisors(base.size());
  for (size_t i = 0; i < base.size(); ++i) divisors[i] = base[i] / scaled[i];
  GgufTensorOptions gg;
  gg.matrix_dtype = DType::kF32;
  gg.embedding_dtype = DType::kF32;
  auto tensors = testing::ToGgufTensors(plain, canonical, gg);
  tensors.push_back(testing::TestTensor::FromF32(
      "rope_freqs.weight", {static_cast<int64_t>(divisors.size())}, divisors));
  ASSERT_TRUE(testing::WriteGguf(dir + "/m.gguf",
                                 testing::GgufMetadataFor(plain), tensors)
                  .ok());
  ASSERT_TRUE(testing::WriteGguf(dir + "/plain.gguf",
                                 testing::GgufMetadataFor(plain),
                                 testing::ToGgufTensors(plain, canonical, gg))
                  .ok());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i)
    prompt.push_back(static_cast<int32_t>((i * 7 + seed) % c.vocab_size));
  const auto want = AllLogits(dir + "/hf", prompt);
  EXPECT_LT(testing::MaxRelativeError(AllLogits(dir + "/m.gguf", prompt), want),
            1e-5)
      << "seed " << seed;
  // Without the divisors the logits differ: the scaling matters here.
  EXPECT_GT(
      testing::MaxRelativeError(AllLogits(dir + "/plain.gguf", prompt), want),
      1e-3)
      << "seed " << seed;
  testing::RemoveTree(dir);
}

}  // namespace
}  // namespace tandem
