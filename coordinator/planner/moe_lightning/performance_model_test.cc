#include "coordinator/planner/moe_lightning/performance_model.h"

#include <cmath>
#include <memory>

#include "coordinator/planner/moe_lightning/ml_test_util.h"
#include "gtest/gtest.h"

namespace tandem::planner::ml {
namespace {

// Mixtral-8x7B in fp16, per layer (from the config, see ModelCost):
//   attention part A = (4096 x 6144 + 4096 x 4096) x 2 + norms 2 x 4096 x 2
//                    = 83,886,080 + 16,384 = 83,902,464 B
//   FFN F = (8 experts x 3 x 4096 x 14336 + router 8 x 4096) x 2
//         = 2,818,637,824 B
//   W_L = 2,902,540,288 B; all 32 layers W = 92,881,289,216 B
//   LM head 32000 x 4096 x 2 = 262,144,000 B (+ final norm 8,192 B)
//   KV: 2 x 1024 x 2 = 4,096 B a token a layer
constexpr double kA = 83'902'464;
constexpr double kWL = 2'902'540'288;
constexpr double kW = 32 * kWL;
constexpr double kHead = 262'144'000 + 8'192;
constexpr double kEmbedding = 262'144'000;

// Round figures so every number below can be worked by hand: GPU 100
// TFLOP/s and 200 GB/s; PCIe 10 GB/s each way; CPU 1 TFLOP/s, 50 GB/s for
// attention and for GEMMs; no fixed costs.
HardwareProfile Round() {
  HardwareProfile p;
  p.name = "round";
  p.gpu.count = 1;
  p.gpu.memory_bytes = 16'000'000'000;
  p.gpu.bf16_flops = 100e12;
  p.gpu.memory_bandwidth = 200e9;
  p.link.h2d_bandwidth = 10e9;
  p.link.d2h_bandwidth = 10e9;
  p.cpu.threads = 16;
  p.cpu.memory_bytes = 200'000'000'000;
  p.cpu.f32_flops = 1e12;
  p.cpu.bf16_flops = 1e12;
  p.cpu.memory_bandwidth = 50e9;
  p.cpu.attention_bandwidth = 50e9;
  return p;
}

Workload Short() {
  Workload w;
  w.prompt_len = 100;
  w.max_prompt_len = 200;
  w.gen_len = 20;
  return w;
}

class PerformanceModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelCost> m = ModelCost::Create(testing::Mixtral8x7B());
    ASSERT_TRUE(m.ok()) << m.status();
    cost_ = std::make_unique<ModelCost>(*m);
  }
  PerformanceModel Make(const ModelOptions& o = ModelOptions{}) {
    absl::StatusOr<PerformanceModel> pm =
        PerformanceModel::Create(cost_.get(), &hw_, &w_, o);
    EXPECT_TRUE(pm.ok()) << pm.status();
    return *pm;
  }
  // N = 64 in two micro-batches of 32.
  static PolicyPoint Point(double r_w = 0) {
    PolicyPoint p;
    p.batch_size = 64;
    p.micro_batch_size = 32;
    p.weights_gpu_fraction = r_w;
    return p;
  }

  std::unique_ptr<ModelCost> cost_;
  HardwareProfile hw_ = Round();
  Workload w_ = Short();
};

TEST_F(PerformanceModelTest, ModelSizes) {
  const PerformanceModel pm = Make();
  EXPECT_DOUBLE_EQ(pm.attention_part_bytes(), kA);
  EXPECT_DOUBLE_EQ(pm.max_layer_weight_bytes(), kWL);
  EXPECT_DOUBLE_EQ(pm.layers_weight_bytes(), kW);
  // Unpadded: KV holds s = 100 prompt tokens, decode attends s + n/2 = 110.
  EXPECT_DOUBLE_EQ(pm.kv_prompt_len(), 100);
  EXPECT_DOUBLE_EQ(pm.decode_context(), 110);
  // A prefill micro-batch of 32: min(32 x 200, 32 x 100 + 200) = 3400.
  EXPECT_DOUBLE_EQ(pm.prefill_tokens_per_micro_batch(32), 3400);
  EXPECT_DOUBLE_EQ(Make({.padded = true}).prefill_tokens_per_micro_batch(32),
                   6400);
}

TEST_F(PerformanceModelTest, DecodeLayerCpuAttentionGpuFfn) {
  const LayerTimes t = Make().DecodeLayer(0, Point());
  ASSERT_EQ(t.num_micro_batches, 2);
  // H2D: the whole layer in 2 pages, W_L / 10 GB/s = 0.2902540288 s, plus
  // D2 (attention output, 32 x 4096 x 2 B = 262,144 B a micro-batch).
  EXPECT_NEAR(t.h2d, kWL / 10e9 + 2 * 262'144 / 10e9, 1e-12);
  EXPECT_NEAR(t.page_load, kWL / 2 / 10e9, 1e-12);
  // D2H: D1, q + k + v = 32 x 6144 x 2 = 393,216 B a micro-batch.
  EXPECT_NEAR(t.d2h, 2 * 393'216 / 10e9, 1e-12);
  // CPU attention per micro-batch: K/V of 32 x 110 keys x 4096 B =
  // 14,417,920 B read + 131,072 written + q in / out 524,288 = 15,073,280
  // B at 50 GB/s = 301.4656 us (the 57.7 MFLOP take 58 us at 1 TFLOP/s).
  EXPECT_NEAR(t.cpu_attention_ub, 301.4656e-6, 1e-12);
  EXPECT_NEAR(t.cpu, 2 * 301.4656e-6, 1e-12);
  // GPU per micro-batch, every op memory-bound at 200 GB/s:
  //   PreAttn: norm (8,192 + 524,288 B) 2.6624 us + QKV (50,331,648 +
  //            655,360 B) 254.93504 us = 257.59744 us
  //   PostAttn: O (33,554,432 + 524,288 B) 170.3936 us, norm 2.6624 us,
  //            router (65,536 + 262,144 B) 1.6384 us, experts: the expected
  //            8 (1 - 0.75^32) active experts x 352,321,536 B + 1,048,576 B
  //            of activations.
  const double experts =
      (8 * (1 - std::pow(0.75, 32)) * 352'321'536.0 + 1'048'576) / 200e9;
  EXPECT_NEAR(t.pre_attention_ub, 257.59744e-6, 1e-12);
  EXPECT_NEAR(t.post_attention_ub,
              170.3936e-6 + 2.6624e-6 + 1.6384e-6 + experts, 1e-12);
  EXPECT_NEAR(t.gpu, 2 * (t.pre_attention_ub + t.post_attention_ub), 1e-15);
  // Eq. 12: the max is the link (0.29 s against 28.7 ms of GPU).
  EXPECT_DOUBLE_EQ(t.seconds(), t.h2d);
  EXPECT_STREQ(t.bottleneck(), "h2d");
  EXPECT_EQ(t.attention_pages, 1);  // the 84 MB of attention fit the first page
}

TEST_F(PerformanceModelTest, ResidentWeightsShortenOnlyTheLink) {
  const PerformanceModel pm = Make();
  const LayerTimes t0 = pm.DecodeLayer(0, Point(0));
  const LayerTimes t = pm.DecodeLayer(0, Point(0.5));
  // Half the layer resident (attention first): half of W_L streams.
  EXPECT_NEAR(t.h2d, 0.5 * kWL / 10e9 + 2 * 262'144 / 10e9, 1e-12);
  EXPECT_DOUBLE_EQ(t.gpu, t0.gpu);  // HBM is read the same either way
  EXPECT_EQ(t.attention_pages, 0);  // attention weights resident
  double attn = 0, ffn = 0;
  pm.SplitResident(0, 0.5, &attn, &ffn);
  EXPECT_DOUBLE_EQ(attn, kA);
  EXPECT_DOUBLE_EQ(ffn, 0.5 * kWL - kA);
}

TEST_F(PerformanceModelTest, PaddingLengthensTheContext) {
  const LayerTimes t = Make({.padded = true}).DecodeLayer(0, Point());
  // Context 200 + 10 = 210: 32 x 210 x 4096 + 131,072 + 524,288 =
  // 28,180,480 B at 50 GB/s = 563.6096 us.
  EXPECT_NEAR(t.cpu_attention_ub, 563.6096e-6, 1e-12);
}

TEST_F(PerformanceModelTest, GpuAttentionSwapsTheCpuShareOfTheKv) {
  PolicyPoint p = Point();
  p.attention_on_gpu = true;
  p.kv_gpu_fraction = 0.25;
  const LayerTimes t = Make().DecodeLayer(0, p);
  // D4: 75% of 32 x 110 x 4096 B = 10,813,440 B a micro-batch, 1.081344 ms.
  EXPECT_NEAR(t.kv_load_ub, 1.081344e-3, 1e-12);
  EXPECT_NEAR(t.h2d, kWL / 10e9 + 2 * 1.081344e-3, 1e-12);
  // New K/V of the CPU share go back: 75% of 32 x 4096 B.
  EXPECT_NEAR(t.d2h, 2 * 0.75 * 32 * 4096 / 10e9, 1e-15);
  EXPECT_EQ(t.cpu, 0);
  EXPECT_EQ(t.hidden_load_ub, 0);
}

TEST_F(PerformanceModelTest, HostFfnRunsOnTheCpu) {
  PolicyPoint p = Point();
  p.ffn_on_gpu = false;
  const LayerTimes t = Make().DecodeLayer(0, p);
  // Only the attention part streams; the experts are read from DRAM at 50
  // GB/s by the CPU (2.818 GB + 1 MB: 56.4 ms a micro-batch; their 22.5
  // GFLOP take 22.5 ms at 1 TFLOP/s).
  const double experts =
      8 * (1 - std::pow(0.75, 32)) * 352'321'536.0 + 1'048'576;
  EXPECT_NEAR(t.cpu_ffn_ub, experts / 50e9, 1e-12);
  EXPECT_NEAR(t.cpu, 2 * (301.4656e-6 + experts / 50e9), 1e-12);
  EXPECT_NEAR(t.h2d, kA / 10e9 + 2 * (262'144 + 262'144) / 10e9, 1e-12);
  EXPECT_NEAR(t.post_attention_ub, 170.3936e-6 + 2.6624e-6 + 1.6384e-6, 1e-12);
  EXPECT_STREQ(t.bottleneck(), "cpu");
}

TEST_F(PerformanceModelTest, OneMicroBatchCannotOverlap) {
  // N = μ = 32, all weights resident (no pages): the GPU is busy 257.6 us
  // + PostAttn a layer, but the one micro-batch must also wait for its q/k/v
  // to go down (393,216 B: 39.3216 us), the CPU attention (301.4656 us) and
  // the output to come back (26.2144 us) before PostAttn: the chain binds.
  PolicyPoint p = Point(1.0);
  p.batch_size = 32;
  const LayerTimes t = Make().DecodeLayer(0, p);
  EXPECT_EQ(t.page_load, 0);
  EXPECT_NEAR(t.chain, t.gpu + 39.3216e-6 + 301.4656e-6 + 26.2144e-6, 1e-12);
  EXPECT_DOUBLE_EQ(t.seconds(), t.chain);
  EXPECT_STREQ(t.bottleneck(), "chain");
  // With two micro-batches the GPU work doubles and hides the chain again.
  EXPECT_STREQ(Make().DecodeLayer(0, Point(1.0)).bottleneck(), "gpu");
}

TEST_F(PerformanceModelTest, LaunchOverheadIsItsOwnResource) {
  hw_.gpu.launch_overhead_s = 1e-3;
  const LayerTimes t = Make().DecodeLayer(0, Point());
  // 2 kernels before attention (norm, QKV) and 4 after (O, norm, router,
  // experts), twice: 12 ms.
  EXPECT_NEAR(t.launch, 12e-3, 1e-15);
}

TEST_F(PerformanceModelTest, PrefillHandNumbers) {
  // Link-bound: each layer streams W_L and the hidden states of all 64 x
  // 100 prompt tokens come in (52,428,800 B): 0.2954969088 s a layer, 32
  // layers, plus the LM head (~2.6 ms).
  EXPECT_NEAR(Make().PrefillSeconds(Point()), 32 * 0.2954969088, 5e-3);
  // Compute-bound with a fast link (1 TB/s): per micro-batch of 3200
  // tokens, QKV 161.06 GFLOP (1.610612736 ms), O 107.37 GFLOP
  // (1.073741824 ms), experts 2254.86 GFLOP (22.548578304 ms) at 100
  // TFLOP/s; norms 2 x 262.18496 us, router 131.39968 us and attention
  // (78,643,200 B) 393.216 us memory-bound: 26.281918464 ms. Two
  // micro-batches a layer, 32 layers, then the LM head twice (264,454,144 B
  // at 200 GB/s + the final norm's 532,480 B: 1.32493312 ms each).
  hw_.link.h2d_bandwidth = hw_.link.d2h_bandwidth = 1e12;
  EXPECT_NEAR(Make().PrefillSeconds(Point()),
              32 * 2 * 26.281918464e-3 + 2 * 1.32493312e-3, 1e-9);
}

TEST_F(PerformanceModelTest, StepAndThroughput) {
  const PerformanceModel pm = Make();
  const PolicyPoint p = Point();
  const Estimate e = pm.Evaluate(p);
  // T_step = 32 x T_layer + the LM head of both micro-batches (1.32493312
  // ms each, as above).
  EXPECT_NEAR(e.decode_step_s,
              32 * pm.DecodeLayer(0, p).seconds() + 2 * 1.32493312e-3, 1e-9);
  EXPECT_DOUBLE_EQ(e.prefill_s, pm.PrefillSeconds(p));
  EXPECT_DOUBLE_EQ(e.throughput,
                   64.0 * 20 / (e.prefill_s + 20 * e.decode_step_s));
  EXPECT_EQ(e.bottleneck, "h2d");
}

TEST_F(PerformanceModelTest, MemoryHandNumbers) {
  const MemoryUse m = Make().Memory(Point(0.25));
  EXPECT_DOUBLE_EQ(m.gpu_resident_weights, 0.25 * kW + kHead);
  EXPECT_DOUBLE_EQ(m.gpu_weight_buffer, 2 * 0.75 * kWL);
  EXPECT_EQ(m.gpu_kv, 0);
  // Activations: 112,656 elements a token (2h + q + 2kv + q + k (3 h2 + h)
  // + 2 E for fp32 router logits) x 2 B = 225,312 B.
  //   decode: residuals 64 x 8,192 + 3 micro-batches x 32 x 225,312 + fp32
  //           logits 32 x 128,000 = 26,250,240 B
  //   prefill (3,400 tokens): 3,400 x (225,312 + 4,096 KV + 2 x 8,192
  //           prefetched hidden) + 32 x 128,000 = 839,788,800 B
  EXPECT_DOUBLE_EQ(m.gpu_decode_activations, 26'250'240);
  EXPECT_DOUBLE_EQ(m.gpu_prefill_peak, 839'788'800);
  EXPECT_DOUBLE_EQ(m.gpu(),
                   0.25 * kW + kHead + 1.5 * kWL + 26'250'240 + 839'788'800);
  // Host: 75% of the layers + the embedding table; KV 32 layers x 64 x
  // (100 + 20) x 4,096 B = 1,006,632,960 B, which outgrows the prefill
  // peak (prompt KV 838,860,800 + hidden 64 x 100 x 8,192 = 52,428,800).
  EXPECT_DOUBLE_EQ(m.cpu_weights, 0.75 * kW + kEmbedding);
  EXPECT_DOUBLE_EQ(m.cpu_kv, 1'006'632'960);
  EXPECT_DOUBLE_EQ(m.cpu_kv_prompt, 838'860'800);
  EXPECT_DOUBLE_EQ(m.cpu_prefill_hidden, 52'428'800);
  EXPECT_DOUBLE_EQ(m.cpu(), 0.75 * kW + kEmbedding + 1'006'632'960);
  EXPECT_EQ(m.cpu_staging, 0);  // pinned host store
  // The paper's two hops: three pinned pages of 0.75 W_L / 2 (Algorithm 1
  // copies page j+2 while page j is in DMA).
  const MemoryUse two_hop =
      Make({.pinned_host_weights = false}).Memory(Point(0.25));
  EXPECT_DOUBLE_EQ(two_hop.cpu_staging, 3 * 0.75 * kWL / 2);
}

TEST_F(PerformanceModelTest, PaperImplementationHandNumbers) {
  const ModelOptions o = PaperImplementationOptions();
  EXPECT_TRUE(o.padded);
  EXPECT_FALSE(o.pinned_host_weights);
  EXPECT_TRUE(o.prefill_hidden_on_gpu);
  EXPECT_TRUE(o.first_token_from_prefill);
  EXPECT_TRUE(o.embedding_on_gpu);
  const PerformanceModel pm = Make(o);
  const PolicyPoint p = Point(0.25);
  const MemoryUse m = pm.Memory(p);
  // The embedding table joins the LM head on the GPU.
  EXPECT_DOUBLE_EQ(m.gpu_resident_weights, 0.25 * kW + kHead + kEmbedding);
  EXPECT_DOUBLE_EQ(m.cpu_weights, 0.75 * kW);
  // Prefill, padded: a micro-batch of 32 x 200 = 6,400 tokens x (225,312
  // activations + 4,096 KV) = 1,468,211,200 B, the hidden states and
  // residuals of the whole batch, 64 x 200 x 2 x 8,192 = 209,715,200 B,
  // and fp32 logits 32 x 128,000: 1,682,022,400 B. Nothing waits on the
  // host.
  EXPECT_DOUBLE_EQ(m.gpu_prefill_peak, 1'682'022'400);
  EXPECT_EQ(m.cpu_prefill_hidden, 0);
  // KV 32 layers x 64 x (200 + 20) x 4,096 B; three pinned pages.
  EXPECT_DOUBLE_EQ(m.cpu_kv, 1'845'493'760);
  EXPECT_DOUBLE_EQ(m.cpu_staging, 3 * 0.75 * kWL / 2);
  EXPECT_DOUBLE_EQ(m.cpu(), 0.75 * kW + 3 * 0.75 * kWL / 2 + 1'845'493'760);

  // Decode: each page (0.75 W_L / 2) is first copied by the CPU, a read
  // and a write at 50 GB/s, beside the attention over the padded context
  // (563.6096 us a micro-batch, as in PaddingLengthensTheContext).
  const LayerTimes t = pm.DecodeLayer(0, p);
  EXPECT_NEAR(t.page_stage, 0.75 * kWL / 50e9, 1e-12);
  EXPECT_NEAR(t.cpu, 2 * (563.6096e-6 + 0.75 * kWL / 50e9), 1e-12);

  // Prefill: link-bound on the 0.75 W_L streamed a layer, 0.2176905216 s,
  // with no hidden states on the link (the GPU's 2 x 50.6 ms, the copy's
  // 87.1 ms and the KV's 5.2 ms fit under it), plus the LM head twice.
  EXPECT_NEAR(pm.PrefillSeconds(p), 32 * 0.2176905216 + 2 * 1.32493312e-3,
              1e-9);
  // A 5 GB/s host makes the staging copy bind: 2 x 0.75 W_L / 5 GB/s.
  hw_.cpu.memory_bandwidth = 5e9;
  EXPECT_NEAR(Make(o).PrefillSeconds(p),
              32 * 2 * 0.75 * kWL / 5e9 + 2 * 1.32493312e-3, 1e-9);

  // The prefill yields the first token: n - 1 = 19 decode steps.
  EXPECT_DOUBLE_EQ(pm.decode_steps(), 19);
  const Estimate e = pm.Evaluate(p);
  EXPECT_DOUBLE_EQ(e.throughput,
                   64.0 * 20 / (e.prefill_s + 19 * e.decode_step_s));
}

TEST_F(PerformanceModelTest, WeightsFractionRangeSolvesTheLinearMemories) {
  // GPU budget = the need at r_w = 0.25 exactly: r_w's upper end is 0.25.
  const double need = 0.25 * kW + kHead + 1.5 * kWL + 26'250'240 + 839'788'800;
  hw_.gpu.memory_bytes = static_cast<int64_t>(need);
  const ModelOptions all = {.gpu_memory_utilization = 1,
                            .cpu_memory_utilization = 1};
  double lo = -1, hi = -1;
  ASSERT_TRUE(Make(all).WeightsFractionRange(Point(), &lo, &hi));
  EXPECT_EQ(lo, 0);
  EXPECT_NEAR(hi, 0.25, 1e-9);
  // Host of 80 GB: (1 - r) W + 262,144,000 + 1,006,632,960 <= 80e9 needs
  // r >= (W + 1,268,776,960 - 80e9) / W = 0.152346...
  hw_.cpu.memory_bytes = 80'000'000'000;
  ASSERT_TRUE(Make(all).WeightsFractionRange(Point(), &lo, &hi));
  EXPECT_NEAR(lo, (kW + 1'268'776'960 - 80e9) / kW, 1e-12);
  EXPECT_NEAR(hi, 0.25, 1e-9);
  // 50 GB of host would need r >= 0.47 > 0.25: nothing fits.
  hw_.cpu.memory_bytes = 50'000'000'000;
  EXPECT_FALSE(Make(all).WeightsFractionRange(Point(), &lo, &hi));
}

TEST_F(PerformanceModelTest, FillKvFractionUsesTheGpuMemoryLeft) {
  // At r_w = 0.25 the GPU needs `need`; half the KV (503,316,480 B) more
  // memory lets A_g keep r_c = 0.5 of it on the GPU.
  const double need = 0.25 * kW + kHead + 1.5 * kWL + 26'250'240 + 839'788'800;
  hw_.gpu.memory_bytes = static_cast<int64_t>(need + 503'316'480);
  const PerformanceModel pm = Make({.gpu_memory_utilization = 1});
  PolicyPoint p = Point(0.25);
  p.attention_on_gpu = true;
  ASSERT_TRUE(pm.FillKvFraction(&p));
  EXPECT_NEAR(p.kv_gpu_fraction, 0.5, 1e-9);
  // Without A_g it stays 0.
  PolicyPoint q = Point(0.25);
  ASSERT_TRUE(pm.FillKvFraction(&q));
  EXPECT_EQ(q.kv_gpu_fraction, 0);
}

TEST_F(PerformanceModelTest, CreateRejectsWhatCannotBeModelled) {
  HardwareProfile cpu_only = Round();
  cpu_only.gpu.count = 0;
  absl::StatusOr<PerformanceModel> a =
      PerformanceModel::Create(cost_.get(), &cpu_only, &w_, {});
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  Workload none = Short();
  none.gen_len = 0;
  EXPECT_EQ(
      PerformanceModel::Create(cost_.get(), &hw_, &none, {}).status().code(),
      absl::StatusCode::kInvalidArgument);
  HardwareProfile no_link = Round();
  no_link.link.h2d_bandwidth = 0;
  EXPECT_EQ(
      PerformanceModel::Create(cost_.get(), &no_link, &w_, {}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PerformanceModel::Create(nullptr, &hw_, &w_, {}).ok());
}

}  // namespace
}  // namespace tandem::planner::ml
