// Tensor parallelism on the host device: weight slicing, the checks on what
// splits, and — for every architecture — a group of ranks (threads, and
// processes over shared memory) producing the single-rank engine's logits
// and greedy tokens, every rank the same bits.
#include "gpu_worker/engine/tensor_parallel.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "common/shm/shm_segment.h"
#include "gpu_worker/engine/shm_all_reduce.h"
#include "gpu_worker/engine/testing/tp_script.h"
#include "gtest/gtest.h"

extern char** environ;

namespace tandem {
namespace {

using testing::MakeTpEngine;
using testing::RunTpScript;
using testing::TpScriptResult;

std::string ModelPath(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

TensorView Matrix(DType t, int64_t n, int64_t k, const std::vector<uint8_t>& bytes) {
  TensorView v;
  v.name = "w";
  v.dtype = t;
  v.shape = {n, k};
  v.data = bytes.data();
  v.nbytes = static_cast<int64_t>(bytes.size());
  return v;
}

TEST(TensorParallelSliceTest, RowsAndColumnsOfPlainAndBlockDtypes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  constexpr int64_t n = 6, k = 128;
  std::vector<float> f(n * k);
  for (float& x : f) x = d(rng);
  std::vector<uint8_t> f32(f.size() * 4);
  std::memcpy(f32.data(), f.data(), f32.size());
  const TensorView w = Matrix(DType::kF32, n, k, f32);

  auto rows = SliceRows(w, 2, 3);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->shape, (std::vector<int64_t>{3, k}));
  EXPECT_EQ(rows->data, f32.data() + 2 * k * 4);  // in place
  ShardStorage storage;
  auto cols = SliceCols(w, 32, 64, storage);
  ASSERT_TRUE(cols.ok()) << cols.status();
  ASSERT_EQ(storage.size(), 1u);
  EXPECT_EQ(cols->shape, (std::vector<int64_t>{n, 64}));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < 64; ++c) ASSERT_EQ(cols->as<float>()[r * 64 + c], f[r * k + 32 + c]);
  }

  // Q8_0: a column slice on block boundaries dequantizes to the same values.
  std::vector<uint8_t> q(static_cast<size_t>(*DTypeBytes(DType::kQ8_0, n * k)));
  QuantizeFromF32(DType::kQ8_0, f.data(), n * k, q.data());
  const TensorView wq = Matrix(DType::kQ8_0, n, k, q);
  std::vector<float> full(n * k), part(n * 64);
  ConvertToF32(DType::kQ8_0, q.data(), n * k, full.data());
  auto qc = SliceCols(wq, 64, 64, storage);
  ASSERT_TRUE(qc.ok()) << qc.status();
  ConvertToF32(DType::kQ8_0, qc->data, n * 64, part.data());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < 64; ++c) ASSERT_EQ(part[r * 64 + c], full[r * k + 64 + c]);
  }
  auto qr = SliceRows(wq, 1, 2);
  ASSERT_TRUE(qr.ok());
  ConvertToF32(DType::kQ8_0, qr->data, 2 * k, part.data());
  for (int64_t i = 0; i < 2 * k; ++i) ASSERT_EQ(part[i], full[k + i]);

  // Off block boundaries, out of range, not a matrix: errors, no crash.
  EXPECT_EQ(SliceCols(wq, 16, 32, storage).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SliceCols(w, 100, 64, storage).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SliceRows(w, 5, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SliceRows(w, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  TensorView vec = w;
  vec.shape = {n * k};
  EXPECT_EQ(SliceRows(vec, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  auto sv = SliceVector(vec, 10, 5);
  ASSERT_TRUE(sv.ok());
  EXPECT_EQ(sv->as<float>()[0], f[10]);
  EXPECT_EQ(SliceVector(vec, n * k - 2, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorParallelConfigTest, WhatSplitsAndWhatDoesNot) {
  ModelConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  EXPECT_TRUE(CheckTensorParallel(c, {0, 2}).ok());
  EXPECT_TRUE(CheckTensorParallel(c, {3, 4}).ok());
  EXPECT_TRUE(CheckTensorParallel(c, {7, 8}).ok());  // KV heads replicated 4 ways
  EXPECT_EQ(CheckTensorParallel(c, {0, 3}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckTensorParallel(c, {0, 16}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckTensorParallel(c, {2, 2}).code(), absl::StatusCode::kInvalidArgument);
  c.qk_norm = QkNorm::kFull;
  EXPECT_TRUE(CheckTensorParallel(c, {0, 2}).ok());
  EXPECT_EQ(CheckTensorParallel(c, {0, 4}).code(), absl::StatusCode::kInvalidArgument);

  c.qk_norm = QkNorm::kNone;
  // Ranks 0-3 share KV head 0, ranks 4-7 KV head 1: exactly their query
  // heads' group (query heads 0-3 use KV head 0).
  for (int r = 0; r < 8; ++r) {
    const AttentionShard s = ShardAttention(c, {r, 8});
    EXPECT_EQ(s.heads, 1);
    EXPECT_EQ(s.head_begin, r);
    EXPECT_EQ(s.kv_heads, 1);
    EXPECT_EQ(s.kv_head_begin, s.head_begin / (c.num_heads / c.num_kv_heads));
  }
  const AttentionShard s = ShardAttention(c, {1, 2});
  EXPECT_EQ(s.heads, 4);
  EXPECT_EQ(s.head_begin, 4);
  EXPECT_EQ(s.kv_heads, 1);
  EXPECT_EQ(s.kv_head_begin, 1);
}

// Runs the script on `size` ranks as threads; every rank's result.
std::vector<absl::StatusOr<TpScriptResult>> RunGroup(const std::string& model, int size,
                                                     const std::vector<int64_t>& streamed = {}) {
  const std::string group = shm::MakeSegmentName("test-tp");
  std::vector<absl::StatusOr<TpScriptResult>> out(static_cast<size_t>(size),
                                                  absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ShmAllReduceOptions o;
      o.timeout = absl::Seconds(60);
      auto ar = ShmAllReduce::Create(group, r, size, o);
      if (!ar.ok()) {
        out[r] = ar.status();
        return;
      }
      auto engine = MakeTpEngine(model, ar->get(), streamed);
      if (!engine.ok()) {
        out[r] = engine.status();
        return;
      }
      out[r] = RunTpScript(**engine);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The group's result against the single rank's: same greedy tokens, logits
// within `tol` of the largest logit's magnitude (the partial sums of a
// row-parallel layer are added in another order).
void ExpectMatches(const TpScriptResult& got, const TpScriptResult& want, double tol) {
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  double scale = 0, worst = 0;
  for (float x : want.logits) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  for (size_t i = 0; i < want.logits.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got.logits[i]) - want.logits[i]));
  }
  EXPECT_LE(worst, tol * std::max(1.0, scale)) << "largest |logit| " << scale;
}

struct TpCase {
  std::string model;
  int size;
};

class TensorParallelEngineTest : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelEngineTest, RanksMatchTheSingleRankEngine) {
  const TpCase& p = GetParam();
  const std::string model = ModelPath(p.model);
  auto single = MakeTpEngine(model, nullptr);
  ASSERT_TRUE(single.ok()) << single.status();
  auto want = RunTpScript(**single);
  ASSERT_TRUE(want.ok()) << want.status();

  const auto got = RunGroup(model, p.size);
  const double tol = p.model.find("bf16") != std::string::npos ? 2e-2 : 1e-4;
  for (int r = 0; r < p.size; ++r) {
    SCOPED_TRACE(absl::StrCat(p.model, " rank ", r, " of ", p.size));
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    ExpectMatches(*got[r], *want, tol);
    // Every rank ends the step with the same bits (replicated LM head over
    // an all-reduced residual stream).
    EXPECT_EQ(got[r]->logits, got[0]->logits);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, TensorParallelEngineTest,
    ::testing::Values(TpCase{"llama_f32", 2}, TpCase{"llama_f32", 4}, TpCase{"qwen2_f32", 2},
                      TpCase{"mixtral_f32", 2}, TpCase{"mixtral_f32", 4},
                      TpCase{"qwen2_moe_f32", 2}, TpCase{"qwen2_moe_f32", 4},
                      TpCase{"qwen3_moe_f32", 2}, TpCase{"olmoe_f32", 2},
                      TpCase{"llama_bf16", 2}, TpCase{"mixtral_bf16", 4}),
    [](const auto& info) { return absl::StrCat(info.param.model, "_tp", info.param.size); });

// A group whose peers are never reached: Engine::Create must refuse a model
// that does not split before it sums anything.
class NoPeers : public AllReduce {
 public:
  NoPeers(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status Sum(float*, int64_t) override { return absl::InternalError("no peers here"); }

 private:
  int rank_, size_;
};

TEST(TensorParallelEngineTest, AModelThatDoesNotSplitIsRefusedOnEveryRank) {
  struct Case {
    std::string model;
    int size;
  };
  // OLMoE normalises the whole K projection, so its 2 KV heads cannot be
  // replicated over 4 ranks; 3 ranks do not divide 4 query heads.
  for (const Case& c : {Case{"olmoe_f32", 4}, Case{"llama_f32", 3}}) {
    for (int r = 0; r < c.size; ++r) {
      NoPeers group(r, c.size);
      auto e = MakeTpEngine(ModelPath(c.model), &group);
      EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument)
          << c.model << " rank " << r << ": " << e.status();
    }
  }
  // A step whose all-reduce fails returns the error and keeps no tokens.
  NoPeers group(0, 2);
  auto e = MakeTpEngine(ModelPath("llama_f32"), &group);
  ASSERT_TRUE(e.ok()) << e.status();
  auto r = (*e)->Step({SequenceChunk{1, {1, 2, 3}, 0, false}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_EQ((*e)->SequenceLength(1), 0);
}

// Each rank streams its shard of the FFN weights (copies of column slices
// for the row-parallel matrices): the group still matches one rank.
TEST(TensorParallelEngineTest, RanksStreamingTheirShardsMatchTheSingleRankEngine) {
  for (const std::string model : {"llama_f32", "qwen2_moe_f32"}) {
    auto single = MakeTpEngine(ModelPath(model), nullptr);
    ASSERT_TRUE(single.ok()) << single.status();
    auto want = RunTpScript(**single);
    ASSERT_TRUE(want.ok()) << want.status();
    const auto got = RunGroup(ModelPath(model), 2, {0, 1});
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(absl::StrCat(model, " rank ", r));
      ASSERT_TRUE(got[r].ok()) << got[r].status();
      ExpectMatches(*got[r], *want, 1e-4);
      EXPECT_EQ(got[r]->logits, got[0]->logits);
    }
  }
}

TEST(TensorParallelEngineTest, OffloadsAreRefusedNotMisused) {
  const std::string group = shm::MakeSegmentName("test-tpo");
  ShmAllReduceOptions o;
  o.timeout = absl::Seconds(5);
  auto a = ShmAllReduce::Create(group, 0, 2, o);
  ASSERT_TRUE(a.ok());
  auto engine = MakeTpEngine(ModelPath("llama_f32"), a->get());
  ASSERT_TRUE(engine.ok()) << engine.status();
  SequenceChunk c{1, {1, 2, 3}, 0, false, /*cpu_attention=*/true};
  auto r = (*engine)->Step({c});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ((*engine)->SequenceLength(1), 0);
}

// The same check with each rank its own process, as tensor-parallel workers
// run: the ranks meet only through the shared-memory group.
TEST(TensorParallelProcessTest, RankProcessesMatchTheSingleRankEngine) {
  const std::string model = ModelPath("mixtral_f32");
  auto single = MakeTpEngine(model, nullptr);
  ASSERT_TRUE(single.ok()) << single.status();
  auto want = RunTpScript(**single);
  ASSERT_TRUE(want.ok()) << want.status();

  constexpr int kSize = 2;
  const std::string group = shm::MakeSegmentName("test-tpp");
  char dir_template[] = "/tmp/tandem-tp-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string exe = std::string(TANDEM_TP_RANK_EXE);
  std::vector<pid_t> pids;
  for (int r = 0; r < kSize; ++r) {
    const std::string rank = std::to_string(r), size = std::to_string(kSize);
    const std::string out = absl::StrCat(dir, "/rank", r);
    std::vector<char*> argv = {const_cast<char*>(exe.c_str()), const_cast<char*>(model.c_str()),
                               const_cast<char*>(group.c_str()), const_cast<char*>(rank.c_str()),
                               const_cast<char*>(size.c_str()), const_cast<char*>(out.c_str()),
                               nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ), 0) << exe;
    pids.push_back(pid);
  }
  for (int r = 0; r < kSize; ++r) {
    int st = 0;
    ASSERT_EQ(waitpid(pids[r], &st, 0), pids[r]);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << r << " status " << st;
    const std::string out = absl::StrCat(dir, "/rank", r);
    auto got = testing::ReadTpResult(out);
    ASSERT_TRUE(got.ok()) << got.status();
    SCOPED_TRACE(absl::StrCat("rank process ", r));
    ExpectMatches(*got, *want, 1e-4);
    std::remove(out.c_str());
  }
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace tandem
