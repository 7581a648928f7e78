// The engine on each device against the engine on the host device, for
// every architecture: a batch of a prompt and a second sequence prefilled
// together, then greedy decode steps fed the host's tokens (teacher
// forcing, so one near-tie cannot derail the rest). On a GPU each step's
// logits must agree within bf16 rounding and the greedy token must be the
// host's wherever the host's top two are not a near-tie; the host device
// posing as one with separate memory must give the same bits. Each step is
// run again greedy_only, picked on the device. Where no GPU
// is visible (or CUDA is not built) only the latter runs, and the test
// says so.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/tiny_models.h"
#include "cpu_worker/ops/sampling.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/testing/test_devices.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

int32_t Argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// The gap between the largest and second largest of x[0, n).
float TopGap(const float* x, int64_t n) {
  std::vector<float> v(x, x + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

class DeviceGreedy : public ::testing::TestWithParam<Arch> {};

absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& dir, DeviceFactory device) {
  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  EngineOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  o.device = std::move(device);
  return Engine::Create(std::move(*ckpt), o);
}

TEST_P(DeviceGreedy, MatchesTheHostDevice) {
  std::vector<testing::TestDevice> devices = testing::TestDevicesNoting();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  const ModelConfig c = testing::TinyConfig(GetParam());
  const std::string dir = testing::MakeTempDir("device_greedy");
  testing::HfTensorOptions bf16;
  bf16.dtype = DType::kBF16;
  ASSERT_TRUE(testing::WriteTinyHfModel(dir, c, seed, bf16).ok());
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt, other;
  for (int i = 0; i < 11; ++i) prompt.push_back(static_cast<int32_t>(rng() % c.vocab_size));
  for (int i = 0; i < 4; ++i) other.push_back(static_cast<int32_t>(rng() % c.vocab_size));

  auto host = Open(dir, nullptr);
  ASSERT_TRUE(host.ok()) << host.status();
  for (size_t di = 1; di < devices.size(); ++di) {
    SCOPED_TRACE(devices[di].name);
    auto gpu = Open(dir, devices[di].make);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    (*host)->FreeSequence(0);
    (*host)->FreeSequence(1);
    std::vector<SequenceChunk> batch = {{0, prompt, 0, true}, {1, other, 0}};
    int64_t len0 = 0, len1 = 0;
    for (int step = 0; step < 8; ++step) {
      auto a = (*host)->Step(batch);
      auto b = (*gpu)->Step(batch);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_EQ(a->logits.size(), b->logits.size());
      double diff = 0, ref = 0;
      for (size_t i = 0; i < a->logits.size(); ++i) {
        diff = std::max(diff, std::fabs(double{a->logits[i]} - b->logits[i]));
        ref = std::max(ref, std::fabs(double{a->logits[i]}));
      }
      if (!testing::IsGpu(devices[di])) {
        EXPECT_EQ(b->logits, a->logits) << "step " << step;
      }
      EXPECT_LT(diff / ref, 3e-2) << "step " << step;
      for (size_t s = 0; s < batch.size(); ++s) {
        const float* ha = a->Row(s);
        const float* hb = b->Row(s);
        if (TopGap(ha, c.vocab_size) > 2 * diff) {
          EXPECT_EQ(Argmax(hb, c.vocab_size), Argmax(ha, c.vocab_size))
              << "step " << step << " sequence " << s;
        }
      }
      // The same step again with every chunk greedy_only: from step 1 on
      // (no chunk wants all its logits) a device with its own memory picks
      // on the device, the argmax and log-prob of the logits it just gave.
      std::vector<SequenceChunk> again = batch;
      for (SequenceChunk& s : again) s.greedy_only = true;
      auto g = (*gpu)->Step(again);
      ASSERT_TRUE(g.ok()) << g.status();
      EXPECT_EQ(g->greedy_ids.empty(), step == 0) << "step " << step;
      for (size_t s = 0; s < g->greedy_ids.size(); ++s) {
        const float* hb = b->Row(s);
        EXPECT_EQ(g->greedy_ids[s], ops::ArgMax(hb, c.vocab_size)) << "step " << step;
        EXPECT_NEAR(g->greedy_logprobs[s], ops::LogProb(hb, c.vocab_size, g->greedy_ids[s]), 1e-5)
            << "step " << step;
      }
      len0 += static_cast<int64_t>(batch[0].tokens.size());
      len1 += static_cast<int64_t>(batch[1].tokens.size());
      batch = {{0, {Argmax(a->Row(0), c.vocab_size)}, len0},
               {1, {Argmax(a->Row(1), c.vocab_size)}, len1}};
    }
  }
  testing::RemoveTree(dir);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, DeviceGreedy,
                         ::testing::Values(Arch::kLlama, Arch::kQwen2, Arch::kMixtral,
                                           Arch::kQwen2Moe, Arch::kQwen3Moe, Arch::kOlmoe));

}  // namespace
}  // namespace tandem
