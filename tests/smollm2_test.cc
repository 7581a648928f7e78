// End-to-end checks on the real default model, SmolLM2-135M-Instruct (GGUF,
// Q4_1), against transformers loading the same file (goldens made by
// tests/golden/make_smollm2_goldens.py): the tokenizer's ids for a passage,
// the passage's mean log-likelihood (within 1%), and a greedy chat answer.
// deploy/test.sh fetches the model and sets TANDEM_SMOLLM2_GGUF.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/checkpoint.h"
#include "common/tokenizer/tokenizer.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/generator.h"
#include "cpu_worker/ops/sampling.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("TANDEM_SMOLLM2_GGUF");
    ASSERT_NE(path, nullptr) << "TANDEM_SMOLLM2_GGUF is not set: run deploy/test.sh, or set it "
                                "to the path deploy/fetch_model.sh prints";
    auto ckpt = Checkpoint::Open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto tok = Tokenizer::FromGguf(*(*ckpt)->gguf());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = tok->release();
    // Two engines over the same file: `exact_` dequantizes the Q4_1 blocks to
    // f32 once and computes in f32 — what transformers computes, so it must
    // agree to the token; `engine_` computes on the blocks (kQuantized,
    // activations rounded to int8 per block, as llama.cpp does), which must
    // stay close to it.
    EngineOptions o;
    o.max_context = 1024;
    o.max_sequences = 2;
    o.compute = ops::ComputeType::kF32;
    auto exact = Engine::Create(std::move(*ckpt), o);
    ASSERT_TRUE(exact.ok()) << exact.status();
    exact_ = exact->release();
    auto again = Checkpoint::Open(path);
    ASSERT_TRUE(again.ok()) << again.status();
    o.compute = ops::ComputeType::kQuantized;
    auto engine = Engine::Create(std::move(*again), o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = engine->release();
    golden_ = nlohmann::json::parse(ReadFile(std::string(TANDEM_TESTDATA_DIR) +
                                             "/smollm2/golden.json"));
  }
  static void TearDownTestSuite() {
    delete exact_;
    delete engine_;
    delete tokenizer_;
  }
  void SetUp() override {
    if (engine_ == nullptr || exact_ == nullptr) GTEST_FAIL() << "model did not load";
  }

  static Tokenizer* tokenizer_;
  static Engine* exact_;
  static Engine* engine_;
  static nlohmann::json golden_;
};

// Log-probs of every next passage token, and each position's argmax.
struct Scored {
  std::vector<double> logprobs;
  std::vector<int32_t> argmax;
};
Scored Score(Engine& e, const std::vector<int32_t>& ids) {
  Scored out;
  SequenceChunk chunk{7, ids, 0, true};
  auto r = e.Step({chunk});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* row = r->Row(0, static_cast<int64_t>(i));
    out.logprobs.push_back(ops::LogProb(row, r->vocab, ids[i + 1]));
    out.argmax.push_back(
        static_cast<int32_t>(std::max_element(row, row + r->vocab) - row));
  }
  e.FreeSequence(7);
  return out;
}
double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

Tokenizer* SmolLM2::tokenizer_ = nullptr;
Engine* SmolLM2::exact_ = nullptr;
Engine* SmolLM2::engine_ = nullptr;
nlohmann::json SmolLM2::golden_;

TEST_F(SmolLM2, PassageTokenizesAsTransformers) {
  const std::string passage = ReadFile(std::string(TANDEM_TESTDATA_DIR) + "/smollm2/passage.txt");
  const auto ids = tokenizer_->Encode(passage, /*add_bos=*/true, /*parse_special=*/true);
  EXPECT_EQ(ids, golden_["passage_ids"].get<std::vector<int32_t>>());
}

TEST_F(SmolLM2, PassageLogLikelihoodEqualsTransformers) {
  const auto ids = golden_["passage_ids"].get<std::vector<int32_t>>();
  const double mean = Mean(Score(*exact_, ids).logprobs);
  const double want = golden_["mean_logprob"].get<double>();
  std::printf("mean log-likelihood: tandem (f32) %.6f transformers %.6f\n", mean, want);
  EXPECT_LT(std::fabs(mean - want), 1e-4 * std::fabs(want));
}

TEST_F(SmolLM2, QuantizedComputeStaysCloseToExact) {
  const auto ids = golden_["passage_ids"].get<std::vector<int32_t>>();
  const Scored exact = Score(*exact_, ids);
  const Scored quant = Score(*engine_, ids);
  ASSERT_EQ(exact.argmax.size(), quant.argmax.size());
  size_t same = 0;
  for (size_t i = 0; i < exact.argmax.size(); ++i) same += exact.argmax[i] == quant.argmax[i];
  const double agree = static_cast<double>(same) / static_cast<double>(exact.argmax.size());
  const double want = golden_["mean_logprob"].get<double>();
  std::printf("mean log-likelihood: tandem (quantized) %.6f exact %.6f transformers %.6f; "
              "top-1 agreement %.3f\n",
              Mean(quant.logprobs), Mean(exact.logprobs), want, agree);
  EXPECT_LT(std::fabs(Mean(quant.logprobs) - want), 0.01 * std::fabs(want));
  EXPECT_GE(agree, 0.9);
}

TEST_F(SmolLM2, GreedyChatAnswerMatchesTransformers) {
  const auto prompt = golden_["chat_prompt_ids"].get<std::vector<int32_t>>();
  const auto want = golden_["chat_greedy"].get<std::vector<int32_t>>();
  GenerationParams p;
  p.max_tokens = static_cast<int64_t>(want.size());
  p.ignore_eos = true;
  auto r = Generate(*exact_, 8, prompt, p);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> got;
  for (const auto& t : r->tokens) got.push_back(t.id);
  std::printf("tandem: %s\n", tokenizer_->Decode(got).c_str());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tandem
