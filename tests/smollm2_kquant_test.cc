// The default model, SmolLM2-135M-Instruct, requantized the way llama.cpp's Q4_K_M
// does it: Q4_K where rows are whole 256-element superblocks (ffn_down, width 1536),
// Q6_K for every other layer's ffn_down, and Q5_0 where they are not (width 576: q, k,
// v, o, gate, up); embeddings and norms as in the file. Tandem converts those tensors
// at load (common/converted_quant.h); its passage log-likelihood and top-1 choices
// must stay with those of the same weights dequantized exactly and given as f32 —
// which smollm2_test.cc checks against transformers.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/converted_quant.h"
#include "common/gguf.h"
#include "common/quant.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/quant_blocks.h"
#include "cpu_worker/ops/sampling.h"
#include "gpu_worker/engine/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

using testing::TestTensor;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Scored {
  std::vector<double> logprobs;
  std::vector<int32_t> argmax;
  double mean = 0;
};

absl::StatusOr<Scored> Score(const std::string& path, const std::vector<int32_t>& ids) {
  auto ckpt = Checkpoint::Open(path);
  if (!ckpt.ok()) return ckpt.status();
  EngineOptions o;
  o.max_context = 1024;
  o.max_sequences = 1;
  o.compute = ops::ComputeType::kF32;
  auto engine = Engine::Create(std::move(*ckpt), o);
  if (!engine.ok()) return engine.status();
  auto r = (*engine)->Step({SequenceChunk{0, ids, 0, true}});
  if (!r.ok()) return r.status();
  Scored out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* row = r->Row(0, static_cast<int64_t>(i));
    out.logprobs.push_back(ops::LogProb(row, r->vocab, ids[i + 1]));
    out.argmax.push_back(static_cast<int32_t>(std::max_element(row, row + r->vocab) - row));
    out.mean += out.logprobs.back();
  }
  out.mean /= static_cast<double>(out.logprobs.size());
  return out;
}

TEST(SmolLM2KQuant, ConvertedTensorsKeepTheModelsPredictions) {
  const char* path = std::getenv("TANDEM_SMOLLM2_GGUF");
  ASSERT_NE(path, nullptr) << "TANDEM_SMOLLM2_GGUF is not set: run deploy/test.sh, or set it "
                              "to the path deploy/fetch_model.sh prints";
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  testing::GgufMetadata meta((*file)->metadata().begin(), (*file)->metadata().end());

  std::vector<TestTensor> stored, exact;
  testing::GgufWriteOptions types;
  int counts[3] = {0, 0, 0};  // Q4_K, Q6_K, Q5_0
  for (const GgufTensorInfo& info : (*file)->tensors()) {
    const TensorView v = (*file)->View(info);
    const bool matrix = info.shape.size() == 2 && info.name != "token_embd.weight";
    if (!matrix) {
      TestTensor t{info.name, info.dtype, info.shape,
                   std::string(static_cast<const char*>(v.data), static_cast<size_t>(v.nbytes))};
      stored.push_back(t);
      exact.push_back(t);
      continue;
    }
    const int64_t n = v.numel();
    std::vector<float> values(static_cast<size_t>(n));
    ConvertToF32(info.dtype, v.data, n, values.data());
    ConvertedQuant q = ConvertedQuant::kQ5_0;
    std::vector<uint8_t> blocks;
    if (info.shape[1] % 256 == 0) {
      const int layer = std::atoi(info.name.c_str() + 4);  // "blk.N."
      q = layer % 2 == 0 ? ConvertedQuant::kQ6_K : ConvertedQuant::kQ4_K;
      blocks = q == ConvertedQuant::kQ6_K ? testing::QuantizeQ6_K(values.data(), n)
                                          : testing::QuantizeQ4_K(values.data(), n);
    } else {
      blocks = testing::QuantizeQ5_0(values.data(), n);
    }
    ++counts[q == ConvertedQuant::kQ4_K ? 0 : q == ConvertedQuant::kQ6_K ? 1 : 2];
    types.type_overrides[info.name] = static_cast<uint32_t>(q);
    stored.push_back(TestTensor{info.name, ConvertedQuantComputeType(q), info.shape,
                                std::string(blocks.begin(), blocks.end())});
    DequantizeConverted(q, blocks.data(), n, values.data());
    exact.push_back(TestTensor::FromF32(info.name, info.shape, values));
  }
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);

  // The conversions go to a cache of the test's own (common/converted_cache.h), removed
  // with it.
  const std::string dir = testing::MakeTempDir("smollm2_kquant");
  const char* cache_before = std::getenv("TANDEM_CACHE_DIR");
  const std::string saved = cache_before != nullptr ? cache_before : "";
  setenv("TANDEM_CACHE_DIR", (dir + "/cache").c_str(), 1);
  const std::string kpath = dir + "/q4_k_m.gguf", fpath = dir + "/exact_f32.gguf";
  ASSERT_TRUE(testing::WriteGguf(kpath, meta, stored, types).ok());
  ASSERT_TRUE(testing::WriteGguf(fpath, meta, exact).ok());
  stored.clear();
  exact.clear();

  const auto golden =
      nlohmann::json::parse(ReadFile(std::string(TANDEM_TESTDATA_DIR) + "/smollm2/golden.json"));
  const auto ids = golden["passage_ids"].get<std::vector<int32_t>>();
  auto k = Score(kpath, ids);
  auto f = Score(fpath, ids);
  testing::RemoveTree(dir);
  if (cache_before != nullptr) {
    setenv("TANDEM_CACHE_DIR", saved.c_str(), 1);
  } else {
    unsetenv("TANDEM_CACHE_DIR");
  }
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_TRUE(f.ok()) << f.status();
  size_t same = 0;
  for (size_t i = 0; i < k->argmax.size(); ++i) same += k->argmax[i] == f->argmax[i];
  const double agree = static_cast<double>(same) / static_cast<double>(k->argmax.size());
  std::printf(
      "mean log-likelihood: converted %.6f exact %.6f (file's Q4_1: %.6f); top-1 "
      "agreement %.4f; tensors Q4_K %d, Q6_K %d, Q5_0 %d\n",
      k->mean, f->mean, golden["mean_logprob"].get<double>(), agree, counts[0], counts[1],
      counts[2]);
  EXPECT_LT(std::fabs(k->mean - f->mean), 2e-3 * std::fabs(f->mean));
  EXPECT_GE(agree, 0.97);
}

}  // namespace
}  // namespace tandem
