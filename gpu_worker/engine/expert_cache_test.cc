// The engine with its expert cache on, on every device (the host device,
// the host device posing as one with its own memory, each GPU): routed
// experts kept in host memory, a few per layer in device slots, each step
// split between the device and the CPU. Logits must equal the all-resident
// host engine's (within f32 rounding: the experts' contributions are added
// in another order; bf16 rounding on a GPU), however the cache is sized,
// and the residency counters must add up.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/local_expert_offload.h"
#include "gpu_worker/engine/testing/engine_test_util.h"
#include "gpu_worker/engine/testing/test_devices.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::MaxRelativeError;
using testing::OpenTestEngine;

// A prefill of two sequences, then decode steps: all logits, concatenated.
std::vector<float> RunSteps(Engine& e, int decode_steps) {
  std::vector<SequenceChunk> batch = {
      {0, {3, 14, 15, 92, 65, 35, 89, 79}, 0, true},
      {1, {32, 38, 46, 26, 43}, 0, true}};
  std::vector<float> all;
  for (int step = 0; step <= decode_steps; ++step) {
    auto r = e.Step(batch);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    all.insert(all.end(), r->logits.begin(), r->logits.end());
    for (SequenceChunk& s : batch) {
      s.start_pos += static_cast<int64_t>(s.tokens.size());
      s.tokens = {static_cast<int32_t>((step * 11 + s.seq_id * 7 + 5) % 100)};
      s.all_logits = false;
    }
  }
  e.FreeSequence(0);
  e.FreeSequence(1);
  return all;
}

class ExpertCacheEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertCacheEngine, LogitsMatchTheResidentEngineAndCountersAddUp) {
  const std::vector<testing::TestDevice> devices = testing::TestDevicesNoting();
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const std::vector<float> want = RunSteps(*host, 6);
  const ModelConfig& c = host->config();
  for (const testing::TestDevice& d : devices) {
    for (int capacity : {1, 2, static_cast<int>(c.num_experts)}) {
      SCOPED_TRACE(d.name + " capacity " + std::to_string(capacity));
      EngineOptions o;
      o.device = d.make;
      o.expert_cache.capacity_per_layer = capacity;
      o.expert_cache.prefetch_budget = 1;
      auto engine = OpenTestEngine(GetParam(), o);
      ASSERT_NE(engine, nullptr);
      ASSERT_NE(engine->expert_cache(), nullptr);
      // Twice: the second pass starts from a warm cache.
      for (int pass = 0; pass < 2; ++pass) {
        const std::vector<float> got = RunSteps(*engine, 6);
        EXPECT_LT(MaxRelativeError(got, want), testing::IsGpu(d) ? 3e-2 : 1e-5)
            << "pass " << pass;
      }
      const ExpertResidencyStats st =
          engine->expert_cache()->residency().Stats();
      const LayerResidencyStats& t = st.total;
      EXPECT_GT(t.activations, 0);
      EXPECT_EQ(t.hits + t.misses, t.activations);
      EXPECT_EQ(t.gpu_computed + t.cpu_computed, t.activations);
      EXPECT_LE(t.admitted, t.loads);
      EXPECT_GT(t.gpu_computed, 0)
          << "the cost model sends experts to the device";
      for (int64_t l = 0; l < c.num_layers; ++l) {
        EXPECT_LE(static_cast<int>(engine->expert_cache()
                                       ->residency()
                                       .Resident(static_cast<int>(l))
                                       .size()),
                  capacity);
      }
    }
  }
}

// The CPU's share goes to the offload the engine is given (it must compute
// any expert), with the same logits.
TEST_P(ExpertCacheEngine, TheCpuShareGoesToTheGivenOffload) {
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const std::vector<float> want = RunSteps(*host, 4);
  EngineOptions o;
  o.expert_cache.capacity_per_layer = 1;
  // CPU compute as fast as the GPU's: the split sends some experts there.
  o.expert_cache.costs.gpu_compute_s = [](int64_t t) {
    return 1e-4 * static_cast<double>(t);
  };
  o.expert_cache.costs.cpu_compute_s = [](int64_t t) {
    return 1e-4 * static_cast<double>(t);
  };
  o.expert_cache.costs.transfer_s = 1e-3;
  auto engine = OpenTestEngine(GetParam(), o);
  ASSERT_NE(engine, nullptr);
  int64_t asked = 0;
  struct Counting : LocalExpertOffload {
    Counting(const ModelWeights* w, int64_t* n)
        : LocalExpertOffload(w, [](int64_t, int64_t) { return true; }), n_(n) {}
    absl::Status Submit(int64_t layer,
                        const std::vector<ExpertJob>& jobs) override {
      *n_ += static_cast<int64_t>(jobs.size());
      return LocalExpertOffload::Submit(layer, jobs);
    }
    int64_t* n_;
  } offload(&host->weights(), &asked);
  engine->SetExpertOffload(&offload);
  EXPECT_LT(MaxRelativeError(RunSteps(*engine, 4), want), 1e-5);
  const LayerResidencyStats t =
      engine->expert_cache()->residency().Stats().total;
  EXPECT_GT(t.cpu_computed, 0);
  EXPECT_EQ(asked, t.cpu_computed);
  engine->SetExpertOffload(
      nullptr);  // back to the engine's own, before `offload` goes
  EXPECT_LT(MaxRelativeError(RunSteps(*engine, 4), want), 1e-5);
}

TEST(ExpertCacheOptionsTest, BadCombinationsAreRefused) {
  auto open = [](EngineOptions o) {
    auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) +
                                 "/models/mixtral_f32");
    EXPECT_TRUE(ckpt.ok());
    return Engine::Create(std::move(*ckpt), o).status().code();
  };
  EngineOptions o;
  o.expert_cache.capacity_per_layer = 5;  // of 4 experts
  EXPECT_EQ(open(o), absl::StatusCode::kInvalidArgument);
  o.expert_cache.capacity_per_layer = 2;
  o.remote_experts = {{1}, {}};
  EXPECT_EQ(open(o), absl::StatusCode::kInvalidArgument);
  o.remote_experts.clear();
  o.streamed_ffn_layers = {1};
  EXPECT_EQ(open(o), absl::StatusCode::kInvalidArgument);
  auto dense =
      Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/llama_f32");
  ASSERT_TRUE(dense.ok());
  EngineOptions d;
  d.expert_cache.capacity_per_layer = 1;
  EXPECT_EQ(Engine::Create(std::move(*dense), d).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// HybriMoE's cost model from measured figures, each term worked out:
// a 10 MB expert, 20 MFLOP per token.
TEST(ExpertCacheCostsTest, FromAProfileEachSideIsItsRoofline) {
  HardwareProfile hw;
  hw.gpu.count = 1;
  hw.gpu.memory_bandwidth = 1e12;   // 10 MB in 10 us
  hw.gpu.bf16_flops = 100e12;       // 20 MFLOP in 0.2 us per token
  hw.gpu.launch_overhead_s = 5e-6;
  hw.cpu.memory_bandwidth = 50e9;   // 10 MB in 200 us
  hw.cpu.bf16_flops = 1e12;         // 20 MFLOP in 20 us per token
  hw.cpu.op_overhead_s = 10e-6;
  hw.link.h2d_bandwidth = 25e9;     // 10 MB in 400 us
  hw.link.h2d_latency_s = 10e-6;
  const experts::ExpertCosts c = ExpertCache::CostsFromProfile(hw, 10'000'000, 20'000'000);
  // GPU: 5 us + max(10 us, 0.2 us · t): memory-bound until t = 50.
  EXPECT_NEAR(c.gpu_compute_s(1), 15e-6, 1e-12);
  EXPECT_NEAR(c.gpu_compute_s(100), 5e-6 + 20e-6, 1e-12);
  // CPU: 10 us + max(200 us, 20 us · t): memory-bound until t = 10.
  EXPECT_NEAR(c.cpu_compute_s(1), 210e-6, 1e-12);
  EXPECT_NEAR(c.cpu_compute_s(20), 10e-6 + 400e-6, 1e-12);
  // Link: 10 us + 400 us.
  EXPECT_NEAR(c.transfer_s, 410e-6, 1e-12);

  // Missing figures take the default model's: compute-only CPU at 200
  // GFLOP/s, a 25 GB/s link, no fixed costs.
  const experts::ExpertCosts d = ExpertCache::CostsFromProfile(HardwareProfile{}, 10'000'000,
                                                               20'000'000);
  const experts::ExpertCosts want = ExpertCache::DefaultCosts(10'000'000, 20'000'000);
  for (int64_t t : {1, 7, 1000}) {
    EXPECT_DOUBLE_EQ(d.gpu_compute_s(t), want.gpu_compute_s(t)) << t;
    EXPECT_DOUBLE_EQ(d.cpu_compute_s(t), want.cpu_compute_s(t)) << t;
  }
  EXPECT_DOUBLE_EQ(d.transfer_s, want.transfer_s);
}

// An engine given a profile splits by it: the cache's model is the
// profile's, for the model's expert size.
TEST(ExpertCacheCostsTest, TheEngineUsesTheProfileItIsGiven) {
  auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/mixtral_f32");
  ASSERT_TRUE(ckpt.ok());
  HardwareProfile hw;
  hw.cpu.op_overhead_s = 1.0;  // a CPU expert costs at least a second
  EngineOptions o;
  o.expert_cache.capacity_per_layer = 1;
  o.expert_cache.profile = hw;
  auto e = Engine::Create(std::move(*ckpt), o);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_NE((*e)->expert_cache(), nullptr);
  EXPECT_GE((*e)->expert_cache()->costs().cpu_compute_s(1), 1.0);
  EXPECT_LT((*e)->expert_cache()->costs().gpu_compute_s(1), 1.0);
}

INSTANTIATE_TEST_SUITE_P(MoeModels, ExpertCacheEngine,
                         ::testing::Values("mixtral_f32", "qwen2_moe_f32",
                                           "qwen3_moe_f32", "olmoe_f32",
                                           "mixtral_bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
