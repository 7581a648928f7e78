// The engine with some sequences' attention (and KV) on an in-process CPU
// attention offload, for every f32 architecture in tests/data/models: logits
// at every position and greedy continuations equal the transformers
// goldens; ragged batches that mix CPU-attention and local sequences (prefill
// chunks and decodes, sequences joining late) give the all-local engine's
// logits and the golden tokens, and freed ids are reused with the other
// placement. Then the rules: no offload, a placement change mid-life, a full
// or failing offload are clean errors.
#include <algorithm>
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
#include "gpu_worker/engine/local_attention_offload.h"
#include "gpu_worker/engine/testing/engine_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string ModelsDir() { return std::string(TANDEM_TESTDATA_DIR) + "/models"; }

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
  std::ifstream lf(dir / g.meta["logits_file"].get<std::string>(),
                   std::ios::binary);
  for (const auto& shape : g.meta["logits_shape"]) {
    const int64_t n = shape[0].get<int64_t>() * shape[1].get<int64_t>();
    std::vector<float> v(static_cast<size_t>(n));
    lf.read(reinterpret_cast<char*>(v.data()), n * 4);
    g.logits.push_back(std::move(v));
  }
  EXPECT_TRUE(lf.good()) << "short logits file in " << dir;
  return g;
}

constexpr int64_t kContext = 256;
constexpr int64_t kSequences = 4;

std::unique_ptr<Engine> LoadEngine(const std::string& name) {
  auto ckpt = Checkpoint::Open(ModelsDir() + "/" + name);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  EngineOptions o;
  o.max_context = kContext;
  o.max_sequences = kSequences;
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

std::unique_ptr<LocalAttentionOffload> MakeOffload(const Engine& e,
                                                   int64_t block,
                                                   int64_t tokens) {
  auto o = LocalAttentionOffload::Create(
      CpuAttentionShapeFor(e.config(), block, tokens));
  EXPECT_TRUE(o.ok()) << o.status();
  return std::move(*o);
}

class CpuAttentionGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = LoadGolden(fs::path(ModelsDir()) / GetParam());
    engine_ = LoadEngine(GetParam());
    // Blocks of 5 tokens: chunks and blocks never line up.
    offload_ = MakeOffload(*engine_, 5, kSequences * kContext);
    engine_->SetAttentionOffload(offload_.get());
    total_blocks_ = engine_->free_kv_blocks();
  }

  Golden golden_;
  std::unique_ptr<LocalAttentionOffload>
      offload_;  // declared first: outlives the engine
  std::unique_ptr<Engine> engine_;
  int64_t total_blocks_ = 0;
};

TEST_P(CpuAttentionGolden, LogitsAtEveryPositionMatchTransformers) {
  const auto& prompts = golden_.meta["prompts"];
  for (size_t p = 0; p < prompts.size(); ++p) {
    SequenceChunk chunk;
    chunk.seq_id = static_cast<int64_t>(p);
    chunk.tokens = prompts[p].get<std::vector<int32_t>>();
    chunk.all_logits = true;
    chunk.cpu_attention = true;
    auto r = engine_->Step({chunk});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->logits.size(), golden_.logits[p].size());
    const double err = testing::MaxRelativeError(
        r->logits.data(), golden_.logits[p].data(), golden_.logits[p].size());
    std::printf("%s prompt %zu on CPU attention: relative logit error %.2e\n",
                GetParam().c_str(), p, err);
    EXPECT_LT(err, 1e-4) << GetParam() << " prompt " << p;
    // The engine's own cache was not touched; the offload holds the sequence.
    EXPECT_EQ(engine_->free_kv_blocks(), total_blocks_);
    EXPECT_TRUE(offload_->cache().Has(chunk.seq_id));
    engine_->FreeSequence(chunk.seq_id);
    EXPECT_FALSE(offload_->cache().Has(chunk.seq_id));
  }
}

TEST_P(CpuAttentionGolden, GreedyContinuationMatchesTransformers) {
  for (const auto& g : golden_.meta["greedy"]) {
    const auto prompt = g["prompt"].get<std::vector<int32_t>>();
    const auto expect = g["continuation"].get<std::vector<int32_t>>();
    GenerationParams params;
    params.max_tokens = static_cast<int64_t>(expect.size());
    params.ignore_eos = true;
    params.prefill_chunk = 7;  // chunked prefill through the offload
    params.cpu_attention = true;
    auto r = Generate(*engine_, 42, prompt, params);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int32_t> got;
    for (const auto& t : r->tokens) got.push_back(t.id);
    EXPECT_EQ(got, expect) << GetParam();
  }
  EXPECT_EQ(offload_->cache().num_sequences(),
            0);  // Generate frees its sequence
  EXPECT_EQ(offload_->cache().free_blocks(), offload_->cache().num_blocks());
}

// One sequence of a simulated continuous-batching run: its prompt goes in
// chunks of `chunk` tokens, starting at step `first_step`, then it decodes.
struct Sim {
  int64_t seq_id;
  bool cpu;
  int64_t chunk;
  int64_t first_step;
  std::vector<int32_t> prompt, want;
  int64_t pos = 0;
  std::vector<int32_t> got;
};

// Runs the sequences together until each has its golden number of tokens;
// every step also runs on `ref` (all attention local) and the logits rows
// must agree. Returns false on a failed step (reported).
bool RunTogether(Engine& engine, Engine& ref, std::vector<Sim>& sims,
                 double* worst) {
  for (int64_t step = 0;; ++step) {
    std::vector<SequenceChunk> batch;
    std::vector<Sim*> in_batch;
    for (Sim& s : sims) {
      if (step < s.first_step || s.got.size() == s.want.size()) continue;
      SequenceChunk c;
      c.seq_id = s.seq_id;
      c.start_pos = s.pos;
      c.cpu_attention = s.cpu;
      const int64_t n = static_cast<int64_t>(s.prompt.size());
      if (s.pos < n) {
        const int64_t take = std::min(s.chunk, n - s.pos);
        c.tokens.assign(s.prompt.begin() + s.pos,
                        s.prompt.begin() + s.pos + take);
      } else {
        c.tokens = {s.got.back()};
      }
      batch.push_back(std::move(c));
      in_batch.push_back(&s);
    }
    if (batch.empty()) return true;
    // Interleave CPU and local sequences in the batch's row order.
    std::rotate(
        batch.begin(),
        batch.begin() + static_cast<std::ptrdiff_t>(step % batch.size()),
        batch.end());
    std::rotate(
        in_batch.begin(),
        in_batch.begin() + static_cast<std::ptrdiff_t>(step % in_batch.size()),
        in_batch.end());
    auto r = engine.Step(batch);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return false;
    std::vector<SequenceChunk> local = batch;
    for (auto& c : local) c.cpu_attention = false;
    auto rr = ref.Step(local);
    EXPECT_TRUE(rr.ok()) << rr.status();
    if (!rr.ok()) return false;
    for (size_t i = 0; i < batch.size(); ++i) {
      Sim& s = *in_batch[i];
      *worst = std::max(
          *worst, testing::MaxRelativeError(r->Row(i), rr->Row(i),
                                            static_cast<size_t>(r->vocab)));
      s.pos += static_cast<int64_t>(batch[i].tokens.size());
      if (s.pos >= static_cast<int64_t>(s.prompt.size())) {
        const float* row = r->Row(i);
        s.got.push_back(
            static_cast<int32_t>(std::max_element(row, row + r->vocab) - row));
      }
    }
  }
}

TEST_P(CpuAttentionGolden,
       RaggedBatchesMixingCpuAndLocalEqualGoldenAndAllLocal) {
  auto ref = LoadEngine(GetParam());
  const auto& greedy = golden_.meta["greedy"];
  ASSERT_GE(greedy.size(), 3u);
  // Different chunk sizes and start steps: prefills overlap decodes.
  const int64_t chunk[3] = {4, 5, 16};
  const int64_t first_step[3] = {0, 1, 3};
  double worst = 0;
  for (const std::vector<bool>& cpu : {std::vector<bool>{true, false, true},
                                       std::vector<bool>{false, true, false}}) {
    std::vector<Sim> sims;
    for (size_t i = 0; i < 3; ++i) {
      sims.push_back({10 + static_cast<int64_t>(i), cpu[i], chunk[i],
                      first_step[i],
                      greedy[i]["prompt"].get<std::vector<int32_t>>(),
                      greedy[i]["continuation"].get<std::vector<int32_t>>()});
    }
    ASSERT_TRUE(RunTogether(*engine_, *ref, sims, &worst));
    for (const Sim& s : sims) {
      EXPECT_EQ(s.got, s.want)
          << GetParam() << " sequence " << s.seq_id << " cpu " << s.cpu;
      EXPECT_EQ(engine_->IsCpuAttention(s.seq_id), s.cpu);
    }
    // Free all; the ids come back next round with the other placement.
    for (const Sim& s : sims) {
      engine_->FreeSequence(s.seq_id);
      ref->FreeSequence(s.seq_id);
    }
    EXPECT_EQ(offload_->cache().num_sequences(), 0);
    EXPECT_EQ(engine_->free_kv_blocks(), total_blocks_);
  }
  std::printf(
      "%s: mixed batches vs all-local, worst relative logit error %.2e\n",
      GetParam().c_str(), worst);
  EXPECT_LT(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(F32Architectures, CpuAttentionGolden,
                         ::testing::ValuesIn(testing::F32TestModels()),
                         [](const auto& info) { return info.param; });

TEST(CpuAttentionEngine, EveryArchitectureIsCovered) {
  EXPECT_EQ(testing::F32TestModels().size(), 6u);
}

class FailingAttention : public AttentionOffload {
 public:
  absl::Status Submit(int64_t, const std::vector<AttentionJob>&) override {
    return absl::OkStatus();
  }
  absl::Status Collect(int64_t, const std::vector<AttentionJob>&) override {
    return absl::UnavailableError("cpu_worker gone");
  }
  void Free(int64_t) override {}
};

TEST(CpuAttentionEngine, PlacementRulesAndFailuresAreCleanErrors) {
  auto engine = LoadEngine("llama_f32");
  const int64_t blocks = engine->free_kv_blocks();
  SequenceChunk c{1, {3, 14, 15, 92, 65}, 0, true, true};
  // No offload: the chunk cannot run, nothing is reserved.
  EXPECT_EQ(engine->Step({c}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->free_kv_blocks(), blocks);

  // A sequence keeps its placement while it holds tokens.
  auto offload = MakeOffload(*engine, 16, 64);
  engine->SetAttentionOffload(offload.get());
  auto want = engine->Step({c});
  ASSERT_TRUE(want.ok()) << want.status();
  SequenceChunk next{1, {35}, 5, false, false};
  EXPECT_EQ(engine->Step({next}).status().code(),
            absl::StatusCode::kInvalidArgument);
  next.cpu_attention = true;
  EXPECT_TRUE(engine->Step({next}).ok());

  // The offload's cache is full: its ResourceExhausted fails the step, and
  // the sequence can run again once room is made.
  SequenceChunk big{2, std::vector<int32_t>(70, 5), 0, false, true};
  EXPECT_EQ(engine->Step({big}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->SequenceLength(2), 0);
  engine->FreeSequence(1);
  EXPECT_EQ(engine->Step({big}).status().code(),
            absl::StatusCode::kResourceExhausted);  // 70 > 64
  big.tokens.resize(60);
  EXPECT_TRUE(engine->Step({big}).ok());
  engine->FreeSequence(2);

  // A dead offload fails the step with kUnavailable and leaves no length
  // behind; the same id then runs locally from scratch with the same logits.
  FailingAttention failing;
  engine->SetAttentionOffload(&failing);
  c.seq_id = 5;
  EXPECT_EQ(engine->Step({c}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(engine->SequenceLength(5), 0);
  c.cpu_attention = false;
  auto r = engine->Step({c});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(testing::MaxRelativeError(r->logits.data(), want->logits.data(),
                                      want->logits.size()),
            1e-6);
  EXPECT_FALSE(engine->IsCpuAttention(5));
  engine->SetAttentionOffload(nullptr);
}

}  // namespace
}  // namespace tandem
