// Compares the engine with Hugging Face transformers on the small random
// checkpoints of every architecture in tests/data/models (made by
// tests/golden/make_model_goldens.py with transformers' own model classes):
// logits at every position of each prompt, and greedy continuations.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/generator.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string ModelsDir() { return std::string(TANDEM_TESTDATA_DIR) + "/models"; }

std::vector<std::string> GoldenModels() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ModelsDir(), ec)) {
    if (fs::exists(e.path() / "golden.json")) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct Golden {
  nlohmann::json meta;
  std::vector<std::vector<float>> logits;  // per prompt: [len * vocab]
};

Golden LoadGolden(const fs::path& dir) {
  Golden g;
  std::ifstream f(dir / "golden.json");
  std::stringstream ss;
  ss << f.rdbuf();
  g.meta = nlohmann::json::parse(ss.str());
  std::ifstream lf(dir / g.meta["logits_file"].get<std::string>(), std::ios::binary);
  for (const auto& shape : g.meta["logits_shape"]) {
    const int64_t n = shape[0].get<int64_t>() * shape[1].get<int64_t>();
    std::vector<float> v(static_cast<size_t>(n));
    lf.read(reinterpret_cast<char*>(v.data()), n * 4);
    g.logits.push_back(std::move(v));
  }
  EXPECT_TRUE(lf.good()) << "short logits file in " << dir;
  return g;
}

class EngineGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::path(ModelsDir()) / GetParam();
    golden_ = LoadGolden(dir_);
    auto ckpt = Checkpoint::Open(dir_.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EngineOptions o;
    o.max_context = 256;
    o.max_sequences = 4;
    auto engine = Engine::Create(std::move(*ckpt), o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    bf16_ = golden_.meta["dtype"] == "bf16";
    // f32 checkpoints compute in f32; bf16 ones in bf16 GEMMs with f32 accumulation.
    tolerance_ = bf16_ ? 2e-2 : 1e-4;
  }

  fs::path dir_;
  Golden golden_;
  std::unique_ptr<Engine> engine_;
  bool bf16_ = false;
  double tolerance_ = 0;
};

// Relative error: max |ours - theirs| over a prompt's logits, divided by the
// largest |theirs| of that prompt.
double RelativeError(const float* ours, const std::vector<float>& theirs) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[i]) - theirs[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(theirs[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

TEST_P(EngineGolden, LogitsAtEveryPositionMatchTransformers) {
  const auto& prompts = golden_.meta["prompts"];
  for (size_t p = 0; p < prompts.size(); ++p) {
    SequenceChunk chunk;
    chunk.seq_id = static_cast<int64_t>(p);
    chunk.tokens = prompts[p].get<std::vector<int32_t>>();
    chunk.all_logits = true;
    auto r = engine_->Step({chunk});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->logits.size(), golden_.logits[p].size());
    const double err = RelativeError(r->logits.data(), golden_.logits[p]);
    std::printf("%s prompt %zu (%zu tokens, %s GEMMs): relative logit error %.2e\n",
                GetParam().c_str(), p, chunk.tokens.size(),
                engine_->compute_type() == ops::ComputeType::kBF16 ? "bf16" : "f32", err);
    EXPECT_LT(err, tolerance_) << GetParam() << " prompt " << p;
    engine_->FreeSequence(chunk.seq_id);
  }
}

TEST_P(EngineGolden, GreedyContinuationMatchesTransformers) {
  for (const auto& g : golden_.meta["greedy"]) {
    const auto prompt = g["prompt"].get<std::vector<int32_t>>();
    const auto expect = g["continuation"].get<std::vector<int32_t>>();
    GenerationParams params;
    params.max_tokens = static_cast<int64_t>(expect.size());
    params.ignore_eos = true;
    params.prefill_chunk = 7;  // exercise chunked prefill
    auto r = Generate(*engine_, 42, prompt, params);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int32_t> got;
    for (const auto& t : r->tokens) got.push_back(t.id);
    EXPECT_EQ(got, expect) << GetParam();
  }
}

// Several sequences of different lengths and positions in one step give the
// same logits as each alone (the ragged batches the scheduler builds).
TEST_P(EngineGolden, RaggedBatchEqualsSequencesAlone) {
  const auto& prompts = golden_.meta["prompts"];
  ASSERT_GE(prompts.size(), 2u);
  const auto a = prompts[0].get<std::vector<int32_t>>();
  const auto b = prompts[1].get<std::vector<int32_t>>();
  // Sequence 1: prefill a[0..2), then a chunk a[2..) together with b whole.
  SequenceChunk a0{1, {a.begin(), a.begin() + 2}, 0, false};
  ASSERT_TRUE(engine_->Step({a0}).ok());
  SequenceChunk a1{1, {a.begin() + 2, a.end()}, 2, true};
  SequenceChunk b0{2, b, 0, true};
  auto mixed = engine_->Step({b0, a1});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  // Decode step of both at different positions.
  SequenceChunk a2{1, {3}, static_cast<int64_t>(a.size()), false};
  SequenceChunk b2{2, {5}, static_cast<int64_t>(b.size()), false};
  auto decode = engine_->Step({a2, b2});
  ASSERT_TRUE(decode.ok());

  const int64_t vocab = engine_->config().vocab_size;
  // a's chunk rows equal the golden rows 2.. of prompt 0; b's equal prompt 1's.
  std::vector<float> a_ref(golden_.logits[0].begin() + 2 * vocab, golden_.logits[0].end());
  EXPECT_LT(RelativeError(mixed->Row(1, 0), a_ref), tolerance_);
  EXPECT_LT(RelativeError(mixed->Row(0, 0), golden_.logits[1]), tolerance_);

  // The decode rows equal single-sequence runs of the extended prompts.
  for (int which = 0; which < 2; ++which) {
    std::vector<int32_t> ext = which == 0 ? a : b;
    ext.push_back(which == 0 ? 3 : 5);
    SequenceChunk alone{100 + which, ext, 0, false};
    auto r = engine_->Step({alone});
    ASSERT_TRUE(r.ok());
    std::vector<float> ref(r->Row(0), r->Row(0) + vocab);
    const double tol = bf16_ ? 1e-2 : 1e-5;
    EXPECT_LT(RelativeError(decode->Row(static_cast<size_t>(which)), ref), tol);
  }
}

TEST_P(EngineGolden, RejectsBadSteps) {
  const int64_t vocab = engine_->config().vocab_size;
  SequenceChunk bad_id{1, {0, static_cast<int32_t>(vocab)}, 0, false};
  EXPECT_EQ(engine_->Step({bad_id}).status().code(), absl::StatusCode::kInvalidArgument);
  SequenceChunk gap{1, {1}, 5, false};  // starts past what the cache holds
  EXPECT_EQ(engine_->Step({gap}).status().code(), absl::StatusCode::kInvalidArgument);
  SequenceChunk x{1, {1}, 0, false};
  EXPECT_EQ(engine_->Step({x, x}).status().code(), absl::StatusCode::kInvalidArgument);
  SequenceChunk too_long{1, std::vector<int32_t>(300, 1), 0, false};
  EXPECT_EQ(engine_->Step({too_long}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Step({}).status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing above left state behind.
  EXPECT_EQ(engine_->SequenceLength(1), 0);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, EngineGolden, ::testing::ValuesIn(GoldenModels()),
                         [](const auto& info) { return info.param; });

TEST(EngineGoldenData, EveryArchitectureAndDtypeIsPresent) {
  const auto names = GoldenModels();
  for (const char* arch : {"llama", "qwen2", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}) {
    for (const char* dt : {"f32", "bf16"}) {
      const std::string want = std::string(arch) + "_" + dt;
      EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << "missing " << want;
    }
  }
}

}  // namespace
}  // namespace tandem
