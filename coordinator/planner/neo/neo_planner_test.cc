#include "coordinator/planner/neo/neo_planner.h"

#include <cstdio>
#include <memory>
#include <string>

#include "coordinator/planner/testing/planner_test_models.h"
#include "gtest/gtest.h"

namespace tandem::planner {
namespace {

using testing::Llama2_70B;
using testing::Llama2_7B;
using testing::Mixtral8x7B;

// NVIDIA T4 + a 24-vCPU Xeon with 192 GB (MoE-Lightning's S1; the figures
// and their sources as in profiles/t4-xeon24.json). Neo's own T4 box
// (g4dn.4xlarge) has 8 cores and 64 GB; its bandwidths are not published.
HardwareProfile T4Xeon() {
  HardwareProfile p;
  p.gpu.count = 1;
  // nvidia-smi: 15360 MiB (datasheet "16 GB").
  p.gpu.memory_bytes = int64_t{15360} << 20;
  // cuBLAS fp16 GEMM under the 70 W cap (NVIDIA developer forum, "About GPU
  // peak performance"); datasheet 65 TFLOPS.
  p.gpu.bf16_flops = 24e12;
  // Jia et al. 2019, "Dissecting the NVidia Turing T4 GPU via
  // Microbenchmarking" (datasheet 320 GB/s).
  p.gpu.memory_bandwidth = 220e9;
  p.gpu.launch_overhead_s = 5e-6;  // a CUDA launch from C++
  // PCIe 3.0 x16 pinned copies (bandwidthTest on Gen3 hosts), ~10 us each.
  p.link.h2d_bandwidth = 12e9;
  p.link.d2h_bandwidth = 12e9;
  p.link.h2d_latency_s = 10e-6;
  p.link.d2h_latency_s = 10e-6;
  // 24 vCPUs (12 Haswell cores), 192 GB: MoE-Lightning Table 2.
  p.cpu.threads = 24;
  p.cpu.memory_bytes = int64_t{192} * 1000 * 1000 * 1000;
  // 12 cores x 2.3 GHz x 32 f32 FLOP/cycle x ~75% (estimate).
  p.cpu.f32_flops = 0.65e12;
  p.cpu.bf16_flops = 0.6e12;
  // Estimate: the VM's share of a 2-socket DDR4-2133 host. CPU attention:
  // MoE-Lightning §6.2 says it is 3-4x faster than moving the KV over
  // PCIe (12 GB/s here).
  p.cpu.memory_bandwidth = 50e9;
  p.cpu.attention_bandwidth = 42e9;
  p.cpu.op_overhead_s = 5e-6;  // one kernel call + OpenMP fork/join
  return p;
}

// One H100 80 GB (PCIe card) with a big host: enough to show what does not fit.
HardwareProfile H100() {
  HardwareProfile p = T4Xeon();
  // H100 PCIe datasheet: 80 GB HBM2e, 2 TB/s, 1513 TFLOPS bf16 with
  // sparsity (756 dense); PCIe 5.0 x16 (63 GB/s raw, ~50 effective).
  p.gpu.memory_bytes = 80'000'000'000;
  p.gpu.bf16_flops = 756e12;
  p.gpu.memory_bandwidth = 2.0e12;
  p.link.h2d_bandwidth = 50e9;
  p.link.d2h_bandwidth = 50e9;
  // Estimate: one socket of 8-channel DDR5-4800 (~300 GB/s peak), 1 TB.
  p.cpu.memory_bytes = int64_t{1000} * 1000 * 1000 * 1000;
  p.cpu.memory_bandwidth = 250e9;
  p.cpu.attention_bandwidth = 200e9;
  return p;
}

// OpenAI summarize-comparisons-like short requests (Neo's T4 workload is
// OSC; its lengths are not in the text): 256 in, 256 out.
Workload Online() {
  Workload w;
  w.prompt_len = 256;
  w.gen_len = 256;
  return w;
}

class NeoPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = ModelCost::Create(Llama2_7B());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<ModelCost>(*std::move(m));
    hw_ = T4Xeon();
    w_ = Online();
  }
  PlanInput Input(const Workload* w = nullptr) const {
    return PlanInput{model_.get(), &hw_, w ? w : &w_};
  }
  std::unique_ptr<ModelCost> model_;
  HardwareProfile hw_;
  Workload w_;
};

TEST_F(NeoPlannerTest, GpuKvHoldsOneSequenceOnT4) {
  // 0.9 · 15360 MiB = 14,495,514,624 B usable. Weights: 6,738,415,616
  // params · 2 = 13,476,831,232. Activations for 3072 rows:
  // 3072 · (4·4096 + 2·11008 + 3·4096) · 2 + 3072 · 32000 · 4 = 704,643,072.
  // GPU KV = 314,040,320 B; a sequence holds 256 + 128 = 384 tokens of
  // 2·32·4096·2 = 524,288 B -> 201,326,592 B: one sequence. The host: 176 GB
  // of KV -> 874 sequences.
  auto cap = NeoCapacityFor(Input(), NeoOptions{});
  ASSERT_TRUE(cap.ok()) << cap.status();
  EXPECT_DOUBLE_EQ(cap->weights_bytes, 13476831232.0);
  EXPECT_DOUBLE_EQ(cap->activation_bytes, 704643072.0);
  EXPECT_NEAR(cap->gpu_kv_bytes, 314040320.0, 1.0);
  EXPECT_DOUBLE_EQ(cap->kv_bytes_per_sequence, 201326592.0);
  EXPECT_EQ(cap->max_gpu_sequences, 1);
  EXPECT_EQ(cap->max_cpu_sequences, 874);
}

TEST_F(NeoPlannerTest, AsymmetricPipelineBeatsGpuOnlyOnT4) {
  // Per layer, a decode row costs the GPU ~1.85 ms of weight reads at any
  // small batch, and one CPU sequence's attention reads 384 · 16 KB = 6.3 MB
  // at 42 GB/s = 0.15 ms. Each sub-batch's linear time hides ~12 CPU
  // sequences' attention, so ~24 run with CPU attention beside the one on
  // the GPU, for twice the linear time: ~25 sequences per ~0.12 s iteration
  // (+ their prefills' share) against 1 per ~0.06 s GPU-only.
  auto plan = PlanNeo(Input());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const proto::Policy& p = plan->policy;
  EXPECT_EQ(p.family(), proto::NEO);
  EXPECT_EQ(p.num_micro_batches(), 2);
  EXPECT_NEAR(p.cpu_attention_sequences(), 24, 3);
  EXPECT_EQ(p.batch_size(), p.cpu_attention_sequences() + 1);
  auto gpu_only = EvaluateNeo(Input(), 1, 0);
  ASSERT_TRUE(gpu_only.ok());
  EXPECT_FALSE(gpu_only->iteration.pipelined);
  const double neo = p.prediction().throughput_tokens_per_s();
  EXPECT_GT(neo, 5 * gpu_only->throughput);
  // The prediction is the simulated iteration plus the prefill share.
  EXPECT_DOUBLE_EQ(p.prediction().decode_step_seconds(),
                   plan->decode_sim.makespan_s);
  EXPECT_NEAR(p.prediction().throughput_tokens_per_s(),
              p.batch_size() / p.prediction().inter_token_latency_seconds(),
              1e-9 * neo);
  EXPECT_GT(plan->decode_sim.busy(Resource::kCpu), 0);
  EXPECT_GT(p.prediction().cpu_memory_bytes(), 20 * 201326592.0);
  std::printf("[neo] LLaMA-2-7B on T4: %s\n", p.rationale().c_str());
  std::printf(
      "[neo] Neo %.1f tok/s (ITL %.3f s) vs GPU-only %.1f tok/s (ITL %.3f s): "
      "%.1fx\n",
      neo, p.prediction().inter_token_latency_seconds(), gpu_only->throughput,
      gpu_only->itl_s, neo / gpu_only->throughput);
}

TEST_F(NeoPlannerTest, SloIsHonoured) {
  auto free_plan = PlanNeo(Input());
  ASSERT_TRUE(free_plan.ok());
  const double neo_itl =
      free_plan->policy.prediction().inter_token_latency_seconds();
  auto gpu_only = EvaluateNeo(Input(), 1, 0);
  ASSERT_TRUE(gpu_only.ok());
  ASSERT_LT(gpu_only->itl_s, neo_itl);

  // Between the two ITLs: two sub-batches cost two weight passes per layer,
  // so only the GPU-only batch meets it.
  Workload online = w_;
  online.objective = Objective::kThroughputUnderItlSlo;
  online.slo_itl_s = 0.5 * (gpu_only->itl_s + neo_itl);
  auto tight = PlanNeo(Input(&online));
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_LE(tight->policy.prediction().inter_token_latency_seconds(),
            online.slo_itl_s);
  EXPECT_EQ(tight->policy.cpu_attention_sequences(), 0);
  EXPECT_EQ(tight->policy.num_micro_batches(), 1);

  // A loose SLO keeps the pipelined plan.
  online.slo_itl_s = 2 * neo_itl;
  auto loose = PlanNeo(Input(&online));
  ASSERT_TRUE(loose.ok());
  EXPECT_GT(loose->policy.cpu_attention_sequences(), 0);

  // Below one weight pass of the model: impossible.
  online.slo_itl_s = 0.01;
  auto none = PlanNeo(Input(&online));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("SLO"), std::string::npos)
      << none.status();
}

TEST_F(NeoPlannerTest, MaxBatchCapsTheSequences) {
  Workload few = w_;
  few.max_batch = 8;
  auto plan = PlanNeo(Input(&few));
  ASSERT_TRUE(plan.ok());
  EXPECT_LE(plan->policy.batch_size(), 8);
}

TEST(NeoPlanner, WeightsMustFitOnTheGpu) {
  // LLaMA-2-70B: 69 B params = 138 GB of bf16 weights on an 80 GB H100.
  auto m = ModelCost::Create(Llama2_70B());
  ASSERT_TRUE(m.ok());
  const HardwareProfile hw = H100();
  const Workload w = Online();
  auto plan = PlanNeo(PlanInput{&*m, &hw, &w});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("weight"), std::string::npos)
      << plan.status();

  const PlanInput missing{&*m, nullptr, &w};
  EXPECT_EQ(PlanNeo(missing).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NeoPlanner, MoeModelsWork) {
  // Mixtral-8x7B (93 GB) on a 141 GB GPU (H200-sized; datasheet 141 GB
  // HBM3e, 4.8 TB/s, 989 TFLOPS bf16 dense): the linear time carries the
  // expected active experts.
  auto m = ModelCost::Create(Mixtral8x7B());
  ASSERT_TRUE(m.ok());
  HardwareProfile hw = H100();
  hw.gpu.memory_bytes = 141'000'000'000;
  hw.gpu.memory_bandwidth = 4.8e12;
  hw.gpu.bf16_flops = 989e12;
  const Workload w = Online();
  auto plan = PlanNeo(PlanInput{&*m, &hw, &w});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->policy.family(), proto::NEO);
  EXPECT_GT(plan->policy.batch_size(), 100);
  EXPECT_GT(plan->policy.prediction().throughput_tokens_per_s(), 0);
  std::printf("[neo] Mixtral-8x7B on 141 GB: %s\n",
              plan->policy.rationale().c_str());
}

}  // namespace
}  // namespace tandem::planner
