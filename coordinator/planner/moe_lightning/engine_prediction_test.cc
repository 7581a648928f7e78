// The prediction of an engine step at a given placement (what `tandem bench`
// prints beside its measured figures), checked on profiles whose one
// resource is so much slower than the others that the step time can be
// worked out by hand from the model's bytes and FLOPs.
#include "coordinator/planner/moe_lightning/engine_prediction.h"

#include "absl/status/status.h"
#include "coordinator/planner/testing/planner_test_models.h"
#include "gtest/gtest.h"

namespace tandem::planner::ml {
namespace {

using ::tandem::planner::testing::Llama2_7B;
using ::tandem::planner::testing::Mixtral8x7B;

// Every rate huge but those the test sets; no launch cost or latency.
HardwareProfile FastProfile() {
  HardwareProfile p;
  p.name = "fast";
  p.gpu.count = 1;
  p.gpu.memory_bytes = 80'000'000'000;
  p.gpu.bf16_flops = 1e18;
  p.gpu.f32_flops = 1e18;
  p.gpu.memory_bandwidth = 1e18;
  p.link.h2d_bandwidth = 1e18;
  p.link.d2h_bandwidth = 1e18;
  p.cpu.threads = 16;
  p.cpu.memory_bytes = 512'000'000'000;
  p.cpu.f32_flops = 1e12;
  p.cpu.bf16_flops = 1e12;
  p.cpu.memory_bandwidth = 100e9;
  return p;
}

ModelCost Cost(const ModelConfig& c) {
  absl::StatusOr<ModelCost> m = ModelCost::Create(c);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

double LayerBytes(const ModelCost& m) {
  double b = 0;
  for (int64_t l = 0; l < m.config().num_layers; ++l) b += m.layer_weight_bytes(l);
  return b;
}

// Every FFN streamed over a 1 GB/s link: the step is the FFN bytes over the
// link (LLaMA-2-7B: 32 x 3 x 4096 x 11008 x 2 B = 8.66 GB, 8.66 s); the
// GPU's share is negligible at these rates.
TEST(EnginePredictionTest, StreamedFfnsOverASlowLinkTakeTheirBytesOverTheLink) {
  const ModelCost m = Cost(Llama2_7B());
  HardwareProfile hw = FastProfile();
  hw.link.h2d_bandwidth = 1e9;
  const double ffn = 32 * m.ffn_weight_bytes(0);
  EXPECT_NEAR(ffn, 32 * 3 * 4096.0 * 11008 * 2, 1e6);
  absl::StatusOr<double> r_w = ResidentFraction(m, ffn);
  ASSERT_TRUE(r_w.ok()) << r_w.status();
  EXPECT_NEAR(*r_w, 1 - ffn / LayerBytes(m), 1e-12);
  EXPECT_GT(*r_w, 0.0);
  EXPECT_LT(*r_w, 0.5);

  absl::StatusOr<StepPrediction> d = PredictDecodeStep(m, hw, *r_w, 1, 129);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NEAR(d->seconds, ffn / 1e9, 1e-6 * ffn / 1e9);
  EXPECT_NEAR(d->tokens_per_s, 1e9 / ffn, 1e-6 * 1e9 / ffn);
  EXPECT_EQ(d->bottleneck, "h2d");
  EXPECT_EQ(d->weights_gpu_fraction, *r_w);

  // A prefill streams the same bytes once: the same time, over its tokens.
  absl::StatusOr<StepPrediction> p = PredictPrefill(m, hw, *r_w, 512);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->seconds, ffn / 1e9, 1e-6 * ffn / 1e9);
  EXPECT_NEAR(p->tokens_per_s, 512e9 / ffn, 1e-6 * 512e9 / ffn);
  EXPECT_EQ(p->bottleneck, "h2d");

  // All resident: nothing crosses the link, and the step is far shorter.
  absl::StatusOr<StepPrediction> all = PredictDecodeStep(m, hw, 1.0, 1, 129);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_LT(all->seconds, 1e-3 * d->seconds);
}

// All resident, HBM the slow resource: one decode token reads every layer
// weight, the LM head and its 129 keys' KV once (fp16 KV at the model's
// default), plus a few activations.
TEST(EnginePredictionTest, ResidentDecodeReadsEveryWeightOnceFromHbm) {
  const ModelCost m = Cost(Llama2_7B());
  HardwareProfile hw = FastProfile();
  hw.gpu.memory_bandwidth = 1e12;
  absl::StatusOr<StepPrediction> d = PredictDecodeStep(m, hw, 1.0, 1, 129);
  ASSERT_TRUE(d.ok()) << d.status();
  const double bytes = LayerBytes(m) + m.lm_head_bytes() + 129 * m.kv_bytes_per_token();
  EXPECT_GT(d->seconds, bytes / 1e12);
  EXPECT_LT(d->seconds, 1.01 * bytes / 1e12);
  EXPECT_EQ(d->bottleneck, "gpu");

  // Sixteen sequences read the weights once between them: nearly 16x the
  // tokens per second, never more.
  absl::StatusOr<StepPrediction> b16 = PredictDecodeStep(m, hw, 1.0, 16, 129);
  ASSERT_TRUE(b16.ok()) << b16.status();
  EXPECT_GT(b16->tokens_per_s, 14 * d->tokens_per_s);
  EXPECT_LE(b16->tokens_per_s, 16 * d->tokens_per_s);
}

// All resident, compute the slow resource: a prefill's time is its FLOPs
// (every layer at 512 causal tokens, the LM head for the one last row)
// over the peak.
TEST(EnginePredictionTest, ResidentPrefillIsItsFlopsOverThePeak) {
  const ModelCost m = Cost(Llama2_7B());
  HardwareProfile hw = FastProfile();
  hw.gpu.bf16_flops = 100e12;
  double flops = 0;
  for (int64_t l = 0; l < m.config().num_layers; ++l) {
    for (const OpCost& op : m.PrefillLayer(l, 1, 512)) flops += op.flops;
  }
  for (const OpCost& op : m.HeadAndTail(1, 1)) flops += op.flops;
  absl::StatusOr<StepPrediction> p = PredictPrefill(m, hw, 1.0, 512);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->seconds, flops / 100e12, 1e-6 * flops / 100e12);
  EXPECT_EQ(p->bottleneck, "gpu");
}

// A MoE decode step of more sequences activates more experts: the routed
// bytes grow, so the aggregate rate grows less than the batch.
TEST(EnginePredictionTest, MoeBatchesReadMoreExperts) {
  const ModelCost m = Cost(Mixtral8x7B());
  HardwareProfile hw = FastProfile();
  hw.gpu.memory_bandwidth = 2e12;
  absl::StatusOr<StepPrediction> b1 = PredictDecodeStep(m, hw, 1.0, 1, 129);
  absl::StatusOr<StepPrediction> b4 = PredictDecodeStep(m, hw, 1.0, 4, 129);
  ASSERT_TRUE(b1.ok() && b4.ok());
  EXPECT_GT(b4->tokens_per_s, b1->tokens_per_s);
  EXPECT_LT(b4->tokens_per_s, 0.8 * 4 * b1->tokens_per_s);
}

TEST(EnginePredictionTest, BadInputsAreErrors) {
  const ModelCost m = Cost(Llama2_7B());
  const HardwareProfile hw = FastProfile();
  EXPECT_EQ(PredictDecodeStep(m, hw, 1.5, 1, 129).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PredictDecodeStep(m, hw, -0.1, 1, 129).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PredictDecodeStep(m, hw, 1, 0, 129).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PredictDecodeStep(m, hw, 1, 1, 0.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PredictPrefill(m, hw, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResidentFraction(m, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResidentFraction(m, 2 * LayerBytes(m)).status().code(),
            absl::StatusCode::kInvalidArgument);
  HardwareProfile cpu_only = hw;
  cpu_only.gpu = GpuSpec{};
  EXPECT_EQ(PredictDecodeStep(m, cpu_only, 1, 1, 129).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::planner::ml
