// The engine's hybrid steps on each device that is not the host's memory
// (a GPU, or the host device posing as one): routed experts computed by an
// expert offload and a sequence's attention by an attention offload while
// the device runs the rest, the rows crossing through host copies; and FFN
// weights streamed from host memory into the device's staging buffers.
// Logits must equal the all-local, all-resident host engine's: within f32
// rounding of a different order of additions for the host kernels, within
// bf16 rounding on a GPU.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint.h"
#include "cpu_worker/ops/sampling.h"
#include "gpu_worker/engine/attention_offload.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/generator.h"
#include "gpu_worker/engine/local_attention_offload.h"
#include "gpu_worker/engine/local_expert_offload.h"
#include "gpu_worker/engine/shm_all_reduce.h"
#include "gpu_worker/engine/testing/engine_test_util.h"
#include "gpu_worker/engine/testing/separate_memory_device.h"
#include "gpu_worker/engine/testing/test_devices.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::MaxRelativeError;
using testing::OpenTestEngine;

bool Remote(int64_t layer, int64_t e) { return (e + layer) % 2 == 1; }

// Three steps of two sequences, the second with cpu_attention when asked:
// a prefill of both, then two decode steps. All logits, concatenated.
std::vector<float> RunSteps(Engine& e, bool cpu_attention) {
  std::vector<SequenceChunk> batch = {
      {0, {3, 14, 15, 92, 65, 35, 89}, 0, true},
      {1, {79, 32, 38, 46}, 0, true, cpu_attention}};
  std::vector<float> all;
  for (int step = 0; step < 3; ++step) {
    auto r = e.Step(batch);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    all.insert(all.end(), r->logits.begin(), r->logits.end());
    for (SequenceChunk& s : batch) {
      s.start_pos += static_cast<int64_t>(s.tokens.size());
      s.tokens = {static_cast<int32_t>((step * 7 + s.seq_id * 5 + 2) % 100)};
    }
  }
  return all;
}

class DeviceOffload : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceOffload, HybridStepsMatchTheAllLocalHost) {
  const std::vector<testing::TestDevice> devices = testing::TestDevicesNoting();
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const std::vector<float> want = RunSteps(*host, false);
  const ModelConfig& c = host->config();
  for (const testing::TestDevice& d : devices) {
    if (d.name == "host") continue;
    SCOPED_TRACE(d.name);
    EngineOptions o;
    o.device = d.make;
    if (c.num_experts > 0) {
      o.remote_experts.resize(static_cast<size_t>(c.num_layers));
      for (int64_t l = 0; l < c.num_layers; ++l) {
        for (int32_t e = 0; c.IsMoeLayer(l) && e < c.num_experts; ++e) {
          if (Remote(l, e))
            o.remote_experts[static_cast<size_t>(l)].push_back(e);
        }
      }
    }
    auto engine = OpenTestEngine(GetParam(), o);
    ASSERT_NE(engine, nullptr);
    // The offloads compute from the host engine's weights (a cpu_worker's
    // own copy in a deployment).
    LocalExpertOffload experts(&host->weights(), Remote);
    if (c.num_experts > 0) engine->SetExpertOffload(&experts);
    auto attention =
        LocalAttentionOffload::Create(CpuAttentionShapeFor(c, 16, 128));
    ASSERT_TRUE(attention.ok()) << attention.status();
    engine->SetAttentionOffload(attention->get());
    const std::vector<float> got = RunSteps(*engine, true);
    EXPECT_LT(MaxRelativeError(got, want), testing::IsGpu(d) ? 3e-2 : 1e-5);
    engine.reset();  // before the offloads it points at
  }
}

// Every layer's FFN but the first streamed page by page into the device's
// staging buffers (the CG part) gives the resident engine's logits: to the
// bit with the host kernels, within bf16 rounding on a GPU.
TEST_P(DeviceOffload, StreamedWeightsMatchResidentOnes) {
  const std::vector<testing::TestDevice> devices = testing::TestDevicesNoting();
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const std::vector<float> want = RunSteps(*host, false);
  for (const testing::TestDevice& d : devices) {
    if (d.name == "host") continue;
    SCOPED_TRACE(d.name);
    EngineOptions o;
    o.device = d.make;
    for (int64_t l = 1; l < host->config().num_layers; ++l)
      o.streamed_ffn_layers.push_back(l);
    o.stream_page_bytes = 4096;  // several pages per matrix
    auto engine = OpenTestEngine(GetParam(), o);
    ASSERT_NE(engine, nullptr);
    ASSERT_NE(engine->weight_pager(), nullptr);
    const std::vector<float> got = RunSteps(*engine, false);
    if (testing::IsGpu(d)) {
      EXPECT_LT(MaxRelativeError(got, want), 3e-2);
    } else {
      EXPECT_EQ(got, want);
    }
  }
}

// Two tensor-parallel ranks on devices with their own memory, summing
// through the host's shared-memory group (a GPU's would be NCCL, tested
// with two GPUs in nccl_all_reduce_test): the device's queued partial sums
// are complete before each all-reduce, OLMoE's full q/k norm included (its
// rows' squares are summed over the ranks through the device's ops). Rank 0's logits equal the single
// host engine's within f32 rounding (the sums run in another order).
TEST_P(DeviceOffload, TensorParallelRanksMatchOneHostRank) {
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const std::vector<float> want = RunSteps(*host, false);
  const std::string name = "/tandem-device-tp-" + std::to_string(getpid());
  std::vector<std::vector<float>> got(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto group = ShmAllReduce::Create(name, r, 2, {});
      ASSERT_TRUE(group.ok()) << group.status();
      EngineOptions o;
      o.device = [] {
        return std::unique_ptr<Device>(new testing::SeparateMemoryDevice());
      };
      o.tensor_parallel = group->get();
      auto engine = OpenTestEngine(GetParam(), o);
      ASSERT_NE(engine, nullptr);
      got[static_cast<size_t>(r)] = RunSteps(*engine, false);
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_LT(MaxRelativeError(got[0], want), 1e-5);
  EXPECT_EQ(got[1], got[0]) << "every rank computes the same logits";
}

// ScheInfer's CC part: half of every dense MLP's intermediate rows on the
// CPU (on its own thread while a device with its own memory runs the
// rest), alone and with the device's half streamed (CG); logits equal the
// whole-MLP engine's within f32 rounding (the down projection is summed in
// two parts). A mixture-of-experts layer is refused: its experts go to the
// CPU whole.
TEST_P(DeviceOffload, CpuRowsOfDenseMlpsMatchTheWholeMlp) {
  const std::vector<testing::TestDevice> devices = testing::TestDevicesNoting();
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const ModelConfig& c = host->config();
  const int64_t half = std::max<int64_t>(32, c.intermediate_size / 2 / 32 * 32);
  std::vector<int64_t> rows(static_cast<size_t>(c.num_layers), half);
  if (c.is_moe()) {
    auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + GetParam());
    ASSERT_TRUE(ckpt.ok());
    EngineOptions o;
    o.cpu_ffn_rows = rows;
    EXPECT_EQ(Engine::Create(std::move(*ckpt), o).status().code(),
              absl::StatusCode::kInvalidArgument);
    return;
  }
  const std::vector<float> want = RunSteps(*host, false);
  for (const testing::TestDevice& d : devices) {
    for (bool streamed : {false, true}) {
      SCOPED_TRACE(d.name + (streamed ? " streamed" : ""));
      EngineOptions o;
      o.device = d.make;
      o.cpu_ffn_rows = rows;
      if (streamed) {
        for (int64_t l = 1; l < c.num_layers; ++l) o.streamed_ffn_layers.push_back(l);
      }
      auto engine = OpenTestEngine(GetParam(), o);
      ASSERT_NE(engine, nullptr);
      ASSERT_EQ(engine->weights().layers[0].mlp_cpu.gate.rows(), half);
      EXPECT_LT(MaxRelativeError(RunSteps(*engine, false), want),
                testing::IsGpu(d) ? 3e-2 : 1e-5);
    }
  }
  // Rows out of range are refused.
  for (int64_t bad : {int64_t{-1}, c.intermediate_size}) {
    auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + GetParam());
    ASSERT_TRUE(ckpt.ok());
    EngineOptions o;
    o.cpu_ffn_rows = {bad};
    EXPECT_EQ(Engine::Create(std::move(*ckpt), o).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

// ScheInfer's prefill token assignment (n_g): the CC rows of a prefill
// step's first n_g rows run on the device from a copy of the CC weights,
// the rest on the CPU; decode steps keep every CC row on the CPU. Each
// split sums to the whole MLP.
TEST_P(DeviceOffload, PrefillTokensOnTheDeviceMatchTheWholeMlp) {
  const std::vector<testing::TestDevice> devices = testing::TestDevicesNoting();
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const ModelConfig& c = host->config();
  if (c.is_moe()) {
    // No dense MLP rows to assign: refused.
    auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + GetParam());
    ASSERT_TRUE(ckpt.ok());
    EngineOptions o;
    o.prefill_gpu_tokens = 5;
    EXPECT_EQ(Engine::Create(std::move(*ckpt), o).status().code(),
              absl::StatusCode::kInvalidArgument);
    return;
  }
  const int64_t half = std::max<int64_t>(32, c.intermediate_size / 2 / 32 * 32);
  const std::vector<int64_t> rows(static_cast<size_t>(c.num_layers), half);
  const std::vector<float> want = RunSteps(*host, false);
  for (const testing::TestDevice& d : devices) {
    for (int64_t n_g : {int64_t{3}, int64_t{1000}}) {
      SCOPED_TRACE(absl::StrCat(d.name, " n_g=", n_g));
      EngineOptions o;
      o.device = d.make;
      o.cpu_ffn_rows = rows;
      o.prefill_gpu_tokens = n_g;
      auto engine = OpenTestEngine(GetParam(), o);
      ASSERT_NE(engine, nullptr);
      EXPECT_LT(MaxRelativeError(RunSteps(*engine, false), want),
                testing::IsGpu(d) ? 3e-2 : 1e-5);
      // The rows each step gave the device: a prefill of 7 + 4 tokens,
      // then one decode token per sequence.
      auto fresh = OpenTestEngine(GetParam(), o);
      ASSERT_NE(fresh, nullptr);
      std::vector<SequenceChunk> batch = {{0, {3, 14, 15, 92, 65, 35, 89}, 0, false},
                                          {1, {79, 32, 38, 46}, 0, false}};
      auto prefill = fresh->Step(batch);
      ASSERT_TRUE(prefill.ok()) << prefill.status();
      EXPECT_EQ(prefill->prefill_gpu_rows, std::min<int64_t>(n_g, 11));
      batch = {{0, {5}, 7, false}, {1, {6}, 4, false}};
      auto decode = fresh->Step(batch);
      ASSERT_TRUE(decode.ok()) << decode.status();
      EXPECT_EQ(decode->prefill_gpu_rows, 0);
    }
  }
  // Negative, or without CC rows to assign: refused.
  for (const auto& [n_g, cc] : {std::pair<int64_t, bool>{-1, true}, {5, false}}) {
    auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + GetParam());
    ASSERT_TRUE(ckpt.ok());
    EngineOptions o;
    if (cc) o.cpu_ffn_rows = rows;
    o.prefill_gpu_tokens = n_g;
    EXPECT_EQ(Engine::Create(std::move(*ckpt), o).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n_g;
  }
}

// Greedy decoding of two sequences (a prefill, then each step's picks fed
// back), every chunk greedy_only or none: on a device with its own memory
// the first picks on the device and returns ids and log-probs without
// logits, the second copies the logits for the host to pick from; both
// must choose the same tokens with the same log-probs. A step with one
// chunk that wants its logits returns logits.
TEST_P(DeviceOffload, GreedyStepsPickOnTheDevice) {
  struct Picks {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    int device_steps = 0;  // steps that returned greedy_ids
  };
  auto decode = [](Engine& e, bool greedy_only) {
    Picks p;
    std::vector<SequenceChunk> batch = {{0, {3, 14, 15, 92, 65, 35, 89}, 0},
                                        {1, {79, 32, 38, 46}, 0}};
    for (int step = 0; step < 4; ++step) {
      for (SequenceChunk& s : batch) s.greedy_only = greedy_only;
      auto r = e.Step(batch);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return p;
      const bool picked = !r->greedy_ids.empty();
      p.device_steps += picked ? 1 : 0;
      EXPECT_EQ(r->logits.empty(), picked);
      for (size_t i = 0; i < batch.size(); ++i) {
        const int32_t id = picked ? r->greedy_ids[i] : ops::ArgMax(r->Row(i), r->vocab);
        p.ids.push_back(id);
        p.logprobs.push_back(picked ? r->greedy_logprobs[i]
                                    : ops::LogProb(r->Row(i), r->vocab, id));
        batch[i].start_pos += static_cast<int64_t>(batch[i].tokens.size());
        batch[i].tokens = {id};
      }
    }
    return p;
  };
  for (const testing::TestDevice& d : testing::TestDevicesNoting()) {
    SCOPED_TRACE(d.name);
    EngineOptions o;
    o.device = d.make;
    auto full = OpenTestEngine(GetParam(), o);
    auto greedy = OpenTestEngine(GetParam(), o);
    ASSERT_NE(full, nullptr);
    ASSERT_NE(greedy, nullptr);
    const Picks want = decode(*full, false);
    const Picks got = decode(*greedy, true);
    EXPECT_EQ(want.device_steps, 0);
    // The host device's logits are in host memory already: nothing to save.
    EXPECT_EQ(got.device_steps, d.name == "host" ? 0 : 4);
    EXPECT_EQ(got.ids, want.ids);
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < want.logprobs.size(); ++i) {
      EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-5) << i;
    }
    // One chunk that wants its logits: the step returns logits.
    std::vector<SequenceChunk> mixed = {{7, {5, 6, 7}, 0}, {8, {9, 10}, 0}};
    mixed[0].greedy_only = true;
    auto r = greedy->Step(mixed);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->greedy_ids.empty());
    EXPECT_EQ(r->logits.size(), 2 * static_cast<size_t>(r->vocab));
  }
}

// Generate on the host device posing as one with its own memory: greedy
// (picked on the device, the prompt's earlier chunks bringing back no
// logits) and sampled with a temperature (logits to the host's sampler)
// give the host's tokens and log-probs exactly. (A GPU's may part from the
// host's at a near-tie; device_greedy_test checks its greedy picks.)
TEST_P(DeviceOffload, GenerateOnEachDeviceMatchesTheHost) {
  auto host = OpenTestEngine(GetParam(), {});
  ASSERT_NE(host, nullptr);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32};
  for (float temperature : {0.0f, 0.8f}) {
    GenerationParams p;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.prefill_chunk = 4;  // three prompt chunks
    p.sampling.temperature = temperature;
    p.sampling.seed = 11;
    auto want = Generate(*host, 1, prompt, p);
    ASSERT_TRUE(want.ok()) << want.status();
    for (const testing::TestDevice& d : testing::TestDevicesNoting()) {
      if (d.name == "host" || testing::IsGpu(d)) continue;
      SCOPED_TRACE(absl::StrCat(d.name, " temperature ", temperature));
      EngineOptions o;
      o.device = d.make;
      auto engine = OpenTestEngine(GetParam(), o);
      ASSERT_NE(engine, nullptr);
      auto got = Generate(*engine, 1, prompt, p);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->tokens.size(), want->tokens.size());
      for (size_t i = 0; i < want->tokens.size(); ++i) {
        EXPECT_EQ(got->tokens[i].id, want->tokens[i].id) << i;
        EXPECT_EQ(got->tokens[i].logprob, want->tokens[i].logprob) << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DeviceOffload,
                         ::testing::Values("llama_f32", "qwen2_f32",
                                           "mixtral_f32", "qwen2_moe_f32",
                                           "qwen3_moe_f32", "olmoe_f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
