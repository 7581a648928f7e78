// Streaming host-resident weights: the pager stages every layer's bytes
// exactly, in order, double-buffered, across steps; urgent copies overtake
// queued pages; copy failures and misuse are clean errors; and an engine
// whose budget streams some or all layers' FFN weights gives the resident
// engine's logits to the bit.
#include "gpu_worker/engine/weight_pager.h"

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint.h"
#include "gpu_worker/engine/copy_engine.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/testing/tp_script.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

struct Layers {
  std::vector<std::vector<std::vector<uint8_t>>> bytes;  // [layer][matrix]
  std::vector<StreamedLayer> streamed;
};

Layers RandomLayers(std::mt19937& rng, const std::vector<std::vector<size_t>>& sizes) {
  Layers l;
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < sizes.size(); ++i) {
    l.bytes.emplace_back();
    for (size_t n : sizes[i]) {
      std::vector<uint8_t> m(n);
      for (auto& b : m) b = static_cast<uint8_t>(byte(rng));
      l.bytes.back().push_back(std::move(m));
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    StreamedLayer s;
    s.layer = static_cast<int64_t>(10 + 3 * i);  // any model layers, in order
    for (const auto& m : l.bytes[i]) s.matrices.push_back({m.data(), m.size()});
    l.streamed.push_back(std::move(s));
  }
  return l;
}

// A staging buffer starting on a cache line, as the engine's are.
struct Staging {
  explicit Staging(size_t n) : raw(n + 64) {}
  uint8_t* data() {
    const auto p = reinterpret_cast<uintptr_t>(raw.data());
    return raw.data() + ((64 - p % 64) % 64);
  }
  std::vector<uint8_t> raw;
};

TEST(WeightPagerTest, StagesEveryLayerExactlyAcrossSteps) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (size_t n_layers : {1, 2, 3, 5}) {
    std::vector<std::vector<size_t>> sizes;
    for (size_t i = 0; i < n_layers; ++i) sizes.push_back({1000 + 7 * i, 3, 4096, 0, 2500});
    Layers l = RandomLayers(rng, sizes);
    Staging s0(20000), s1(20000);
    HostCopyEngine engine;
    auto pager = WeightPager::Create(l.streamed, s0.data(), s1.data(), 20000, 999, &engine);
    ASSERT_TRUE(pager.ok()) << pager.status();
    for (int step = 0; step < 3; ++step) {
      (*pager)->BeginStep();
      for (size_t i = 0; i < n_layers; ++i) {
        auto at = (*pager)->Acquire(l.streamed[i].layer);
        ASSERT_TRUE(at.ok()) << at.status();
        ASSERT_EQ(at->size(), l.bytes[i].size());
        for (size_t m = 0; m < at->size(); ++m) {
          EXPECT_EQ(reinterpret_cast<uintptr_t>((*at)[m]) % 64, 0u) << "cache-line aligned";
          EXPECT_EQ(std::memcmp((*at)[m], l.bytes[i][m].data(), l.bytes[i][m].size()), 0)
              << n_layers << " layers, step " << step << ", layer " << i << ", matrix " << m;
        }
        // The other buffer fills meanwhile; this one stays as it was.
        absl::SleepFor(absl::Milliseconds(1));
        for (size_t m = 0; m < at->size(); ++m) {
          EXPECT_EQ(std::memcmp((*at)[m], l.bytes[i][m].data(), l.bytes[i][m].size()), 0);
        }
        (*pager)->Release(l.streamed[i].layer);
      }
    }
    const WeightPagerStats st = (*pager)->stats();
    // 3 steps of every layer, plus the (up to) two prefetched for a 4th.
    EXPECT_EQ(st.layers_streamed, static_cast<int64_t>(3 * n_layers + std::min<size_t>(2, n_layers)));
    EXPECT_GT(st.pages, st.layers_streamed * 5);  // several pages per matrix
  }
}

TEST(WeightPagerTest, OutOfOrderUseAndBadSetupsAreErrors) {
  std::mt19937 rng(1);
  Layers l = RandomLayers(rng, {{100}, {200}});
  std::vector<uint8_t> s0(256), s1(256);
  HostCopyEngine engine;
  auto pager = WeightPager::Create(l.streamed, s0.data(), s1.data(), 256, 64, &engine);
  ASSERT_TRUE(pager.ok());
  EXPECT_EQ((*pager)->Acquire(10).status().code(), absl::StatusCode::kFailedPrecondition)
      << "before BeginStep";
  (*pager)->BeginStep();
  EXPECT_EQ((*pager)->Acquire(13).status().code(), absl::StatusCode::kFailedPrecondition)
      << "the second layer first";
  EXPECT_TRUE((*pager)->Acquire(10).ok());

  EXPECT_EQ(WeightPager::Create({}, s0.data(), s1.data(), 256, 64, &engine).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WeightPager::Create(l.streamed, s0.data(), s1.data(), 150, 64, &engine)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);  // layer 13 does not fit
  EXPECT_EQ(WeightPager::Create(l.streamed, nullptr, s1.data(), 256, 64, &engine).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WeightPager::Create(l.streamed, s0.data(), s1.data(), 256, 0, &engine).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<StreamedLayer> twice = {l.streamed[0], l.streamed[0]};
  EXPECT_EQ(WeightPager::Create(twice, s0.data(), s1.data(), 256, 64, &engine).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A copy engine whose copies fail while `failing` is set.
class FlakyCopyEngine : public CopyEngine {
 public:
  std::atomic<bool> failing{false};
  void Copy(const CopyTask& task, bool urgent, Done done) override {
    if (failing.load()) {
      done(absl::DataLossError("PCIe error"));
      return;
    }
    inner_.Copy(task, urgent, std::move(done));
  }

 private:
  HostCopyEngine inner_;
};

TEST(WeightPagerTest, AFailedCopyFailsTheAcquireAndResetRecovers) {
  std::mt19937 rng(2);
  Layers l = RandomLayers(rng, {{300}, {300}, {300}});
  std::vector<uint8_t> s0(512), s1(512);
  FlakyCopyEngine engine;
  auto pager = WeightPager::Create(l.streamed, s0.data(), s1.data(), 512, 100, &engine);
  ASSERT_TRUE(pager.ok());
  engine.failing = true;
  (*pager)->BeginStep();
  auto at = (*pager)->Acquire(10);
  EXPECT_EQ(at.status().code(), absl::StatusCode::kDataLoss) << at.status();
  EXPECT_NE(at.status().message().find("layer 10"), std::string::npos) << at.status();
  (*pager)->Reset();
  engine.failing = false;
  (*pager)->BeginStep();
  for (size_t i = 0; i < 3; ++i) {
    auto ok = (*pager)->Acquire(l.streamed[i].layer);
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(std::memcmp((*ok)[0], l.bytes[i][0].data(), 300), 0);
    (*pager)->Release(l.streamed[i].layer);
  }
}

TEST(CopyEngineTest, UrgentCopiesOvertakeQueuedPages) {
  HostCopyEngine engine;
  engine.Pause(true);
  std::vector<uint8_t> src(64, 7), dst(64 * 12);
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification all;
  auto record = [&](int id) {
    return [&, id](absl::Status s) {
      EXPECT_TRUE(s.ok());
      absl::MutexLock lock(&mu);
      order.push_back(id);
      if (order.size() == 12) all.Notify();
    };
  };
  for (int i = 0; i < 10; ++i) engine.Copy({dst.data() + 64 * i, src.data(), 64}, false, record(i));
  engine.Copy({dst.data() + 640, src.data(), 64}, true, record(100));
  engine.Copy({dst.data() + 704, src.data(), 64}, true, record(101));
  engine.Pause(false);
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The activations first, in their order; the pages after, in theirs.
  EXPECT_EQ(order, (std::vector<int>{100, 101, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  for (uint8_t b : dst) EXPECT_EQ(b, 7);
}

std::unique_ptr<Engine> MakeEngine(const std::string& model, int64_t budget,
                                   std::vector<int64_t> streamed = {}) {
  auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + model);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  EngineOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  o.weight_budget_bytes = budget;
  o.streamed_ffn_layers = std::move(streamed);
  o.stream_page_bytes = 4096;
  auto e = Engine::Create(std::move(*ckpt), o);
  if (!e.ok()) return nullptr;
  return std::move(*e);
}

class StreamedEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamedEngineTest, StreamedFfnWeightsGiveTheResidentLogitsToTheBit) {
  auto resident = MakeEngine(GetParam(), 0);
  ASSERT_NE(resident, nullptr);
  EXPECT_EQ(resident->weight_pager(), nullptr);
  auto want = testing::RunTpScript(*resident);
  ASSERT_TRUE(want.ok()) << want.status();
  const int64_t layers = static_cast<int64_t>(resident->weights().layers.size());
  std::vector<std::vector<int64_t>> choices = {{layers - 1}, {0}};
  std::vector<int64_t> every(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) every[static_cast<size_t>(l)] = l;
  choices.push_back(every);
  for (const auto& streamed : choices) {
    SCOPED_TRACE(absl::StrCat(GetParam(), ": ", streamed.size(), " of ", layers,
                              " layers streamed, the first ", streamed[0]));
    auto e = MakeEngine(GetParam(), 0, streamed);
    ASSERT_NE(e, nullptr);
    ASSERT_NE(e->weight_pager(), nullptr);
    auto got = testing::RunTpScript(*e);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_EQ(got->logits, want->logits);
    // Every step (5) streamed every listed layer, plus the prefetch for a 6th.
    const WeightPagerStats st = e->weight_pager()->stats();
    EXPECT_GE(st.layers_streamed, static_cast<int64_t>(5 * streamed.size()));
    EXPECT_GT(st.bytes, 0);
  }
  // Bad lists and a budget that holds nothing are refused.
  EXPECT_EQ(MakeEngine(GetParam(), 0, {layers}), nullptr);
  EXPECT_EQ(MakeEngine(GetParam(), 0, {0, 0}), nullptr);
  EXPECT_EQ(MakeEngine(GetParam(), 1), nullptr);
}

// A budget picks the streamed layers itself, from the last one back, when
// streaming them saves more than the two staging buffers cost (three
// layers of which two are MoE here).
TEST(StreamedEngineBudgetTest, ABudgetStreamsTheLastLayersAndKeepsTheLogits) {
  auto resident = MakeEngine("qwen2_moe_f32", 0);
  ASSERT_NE(resident, nullptr);
  auto want = testing::RunTpScript(*resident);
  ASSERT_TRUE(want.ok());
  bool streamed_any = false;
  for (double f : {0.99, 0.95, 0.9, 0.85, 0.8}) {
    int64_t total = 0;
    for (const LayerWeights& l : resident->weights().layers) {
      total += l.q.nbytes() + l.k.nbytes() + l.v.nbytes() + l.o.nbytes() + l.router.nbytes();
      if (!l.moe) total += l.mlp.gate.nbytes() + l.mlp.up.nbytes() + l.mlp.down.nbytes();
      for (const auto& e : l.experts) total += e.gate.nbytes() + e.up.nbytes() + e.down.nbytes();
      if (l.has_shared_expert) {
        total += l.shared.gate.nbytes() + l.shared.up.nbytes() + l.shared.down.nbytes();
      }
    }
    total += resident->weights().lm_head.nbytes();
    auto e = MakeEngine("qwen2_moe_f32", static_cast<int64_t>(f * static_cast<double>(total)));
    if (e == nullptr || e->weight_pager() == nullptr) continue;
    streamed_any = true;
    const auto& layers = e->weight_pager()->layers();
    EXPECT_EQ(layers.back().layer, 2) << "the last layer goes first";
    auto got = testing::RunTpScript(*e);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->logits, want->logits);
  }
  EXPECT_TRUE(streamed_any);
}

INSTANTIATE_TEST_SUITE_P(Models, StreamedEngineTest,
                         ::testing::Values("llama_f32", "qwen2_f32", "mixtral_bf16",
                                           "qwen2_moe_f32", "olmoe_f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
