// Sequences that follow the caller's block tables and start from a prefix
// another sequence computed (prefix caching): for every f32 architecture, on
// every test device, a sequence that shares the first blocks of another's
// KV gives the logits of the same sequence computed whole, and both keep
// doing so while they decode side by side into blocks of their own.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/testing/engine_test_util.h"
#include "gpu_worker/engine/testing/test_devices.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr int64_t kBlock = 4;

std::unique_ptr<Engine> Open(const std::string& name, DeviceFactory device) {
  auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + name);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return nullptr;
  EngineOptions o;
  o.max_context = 64;
  o.max_sequences = 2;  // 32 blocks of 4
  o.block_size = kBlock;
  o.device = std::move(device);
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

int32_t Argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

class SharedPrefix : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedPrefix, GivesTheLogitsOfTheWholeSequence) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (const testing::TestDevice& d : testing::TestDevicesNoting()) {
    SCOPED_TRACE(d.name);
    auto ref = Open(GetParam(), d.make);   // allocates its own KV
    auto test = Open(GetParam(), d.make);  // follows the tables below
    ASSERT_NE(ref, nullptr);
    ASSERT_NE(test, nullptr);
    const int64_t vocab = ref->config().vocab_size;
    auto tokens = [&](int n) {
      std::vector<int32_t> t;
      for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng() % vocab));
      return t;
    };
    // Three shared blocks, then tails of their own.
    const std::vector<int32_t> common = tokens(3 * kBlock);
    std::vector<int32_t> a = common, b = common;
    for (int32_t t : tokens(5)) a.push_back(t);
    for (int32_t t : tokens(7)) b.push_back(t);
    // Scattered ids; b's table starts with a's first three blocks.
    std::vector<int32_t> table_a = {17, 3, 25, 8, 30, 12, 1};
    std::vector<int32_t> table_b = {17, 3, 25, 6, 21, 14, 29};
    const double tol = testing::IsGpu(d) ? 3e-2 : 1e-4;

    auto compare = [&](const StepResult& want, size_t want_chunk, const StepResult& got,
                       size_t got_chunk, const std::string& what) {
      const float* w = want.Row(want_chunk);
      const float* g = got.Row(got_chunk);
      EXPECT_LT(testing::MaxRelativeError(g, w, static_cast<size_t>(vocab)), tol) << what;
    };

    // a runs whole on both engines.
    SequenceChunk ra{0, a, 0};
    SequenceChunk ta{0, a, 0};
    ta.block_table = table_a;
    auto r1 = ref->Step({ra});
    auto t1 = test->Step({ta});
    ASSERT_TRUE(r1.ok()) << r1.status();
    ASSERT_TRUE(t1.ok()) << t1.status();
    compare(*r1, 0, *t1, 0, "a's prompt");

    // b: whole on the reference; on the test engine only its tail, reading
    // the common part from a's blocks.
    SequenceChunk rb{1, b, 0};
    SequenceChunk tb{1, std::vector<int32_t>(b.begin() + 3 * kBlock, b.end()), 3 * kBlock};
    tb.block_table = table_b;
    tb.shared_prefix_tokens = 3 * kBlock;
    auto r2 = ref->Step({rb});
    auto t2 = test->Step({tb});
    ASSERT_TRUE(r2.ok()) << r2.status();
    ASSERT_TRUE(t2.ok()) << t2.status();
    compare(*r2, 0, *t2, 0, "b's prompt from the shared prefix");

    // Both decode together, each writing blocks of its own.
    int64_t len_a = static_cast<int64_t>(a.size()), len_b = static_cast<int64_t>(b.size());
    int32_t next_a = Argmax(r1->Row(0), vocab), next_b = Argmax(r2->Row(0), vocab);
    for (int step = 0; step < 6; ++step) {
      std::vector<SequenceChunk> rbatch = {{0, {next_a}, len_a}, {1, {next_b}, len_b}};
      std::vector<SequenceChunk> tbatch = rbatch;
      tbatch[0].block_table = table_a;
      tbatch[1].block_table = table_b;
      auto r = ref->Step(rbatch);
      auto t = test->Step(tbatch);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(t.ok()) << t.status();
      compare(*r, 0, *t, 0, absl::StrCat("a's decode ", step));
      compare(*r, 1, *t, 1, absl::StrCat("b's decode ", step));
      next_a = Argmax(r->Row(0), vocab);
      next_b = Argmax(r->Row(1), vocab);
      ++len_a;
      ++len_b;
    }
    // a goes; b's blocks, shared ones included, still hold its KV.
    test->FreeSequence(0);
    ref->FreeSequence(0);
    std::vector<SequenceChunk> rlast = {{1, {next_b}, len_b}};
    std::vector<SequenceChunk> tlast = rlast;
    tlast[0].block_table = table_b;
    auto r = ref->Step(rlast);
    auto t = test->Step(tlast);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(t.ok()) << t.status();
    compare(*r, 0, *t, 0, "b after a is freed");
  }
}

TEST_P(SharedPrefix, RefusesPlansThatCannotHold) {
  auto e = Open(GetParam(), nullptr);
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> tail = {1, 2};
  // A shared prefix without a table, or not where the chunk starts.
  SequenceChunk no_table{0, tail, 8};
  no_table.shared_prefix_tokens = 8;
  EXPECT_EQ(e->Step({no_table}).status().code(), absl::StatusCode::kInvalidArgument);
  SequenceChunk elsewhere{0, tail, 4};
  elsewhere.block_table = {0, 1, 2};
  elsewhere.shared_prefix_tokens = 8;
  EXPECT_EQ(e->Step({elsewhere}).status().code(), absl::StatusCode::kInvalidArgument);
  // A table naming a block outside the cache, or too short.
  SequenceChunk outside{0, tail, 0};
  outside.block_table = {0, 99};
  EXPECT_EQ(e->Step({outside}).status().code(), absl::StatusCode::kInvalidArgument);
  SequenceChunk short_table{0, {1, 2, 3, 4, 5}, 0};
  short_table.block_table = {0};
  EXPECT_EQ(e->Step({short_table}).status().code(), absl::StatusCode::kInvalidArgument);
  // Following tables and allocating do not mix.
  SequenceChunk adopted{0, tail, 0};
  adopted.block_table = {4};
  ASSERT_TRUE(e->Step({adopted}).ok());
  SequenceChunk own{1, tail, 0};
  EXPECT_EQ(e->Step({own}).status().code(), absl::StatusCode::kFailedPrecondition);
  e->FreeSequence(0);
  EXPECT_TRUE(e->Step({own}).ok());
}

INSTANTIATE_TEST_SUITE_P(F32Models, SharedPrefix, ::testing::ValuesIn(testing::F32TestModels()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace tandem
