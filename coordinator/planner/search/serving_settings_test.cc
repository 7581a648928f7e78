#include "coordinator/planner/search/serving_settings.h"

#include <cstdio>
#include <string>
#include <utility>

#include "coordinator/planner/search/plan_report.h"
#include "coordinator/planner/search/policy_search.h"
#include "coordinator/planner/testing/planner_test_models.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::planner {
namespace {

ModelConfig Dense() { return testing::Llama2_7B(); }  // 32 layers, intermediate 11008

proto::Policy Uniform(proto::ScheduleFamily f, int layers, double gg, double cg, double cc) {
  proto::Policy p;
  p.set_family(f);
  for (int l = 0; l < layers; ++l) {
    proto::LayerPolicy* lp = p.add_layers();
    lp->set_layer(l);
    lp->set_gg_fraction(gg);
    lp->set_cg_fraction(cg);
    lp->set_cc_fraction(cc);
  }
  return p;
}

TEST(ServingSettingsTest, ScheInferSharesBecomeWholeBlocksOfCpuRowsAndStreamedLayers) {
  const ModelConfig c = Dense();
  proto::Policy p = Uniform(proto::SCHEINFER, 32, 0.5, 0.2, 0.3);
  // Layers 0-9 mostly streamed: CG 0.5 >= GG 0.2.
  for (int l = 0; l < 10; ++l) {
    p.mutable_layers(l)->set_gg_fraction(0.2);
    p.mutable_layers(l)->set_cg_fraction(0.5);
  }
  p.set_prefill_gpu_tokens(48);
  p.set_batch_size(8);
  p.set_prefill_token_budget(1024);
  p.set_gpu_kv_blocks(300);
  p.set_kv_block_tokens(16);
  absl::StatusOr<ServingSettings> s = SettingsFromPolicy(p, c);
  ASSERT_TRUE(s.ok()) << s.status();
  // 0.3 x 11008 = 3302.4 rows, down to whole blocks of 32: 3296.
  ASSERT_EQ(s->cpu_ffn_rows.size(), 32u);
  for (int64_t rows : s->cpu_ffn_rows) EXPECT_EQ(rows, 3296);
  ASSERT_EQ(s->streamed_ffn_layers.size(), 10u);
  for (int l = 0; l < 10; ++l) EXPECT_EQ(s->streamed_ffn_layers[static_cast<size_t>(l)], l);
  EXPECT_EQ(s->prefill_gpu_tokens, 48);
  EXPECT_EQ(s->max_num_seqs, 8);
  EXPECT_EQ(s->max_num_batched_tokens, 1024);
  EXPECT_EQ(s->kv_blocks, 300);
  EXPECT_EQ(s->cpu_experts, "none");
}

TEST(ServingSettingsTest, AllOnTheGpuOrAllOnTheHostSetsNothingButTheBatch) {
  proto::Policy p = Uniform(proto::GPU_RESIDENT, 32, 1, 0, 0);
  p.set_batch_size(64);
  absl::StatusOr<ServingSettings> s = SettingsFromPolicy(p, Dense());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->cpu_ffn_rows.empty());
  EXPECT_TRUE(s->streamed_ffn_layers.empty());
  EXPECT_EQ(s->prefill_gpu_tokens, 0);
  EXPECT_EQ(s->max_num_seqs, 64);
  // The host device: its "CPU share" is the device itself.
  s = SettingsFromPolicy(Uniform(proto::HOST_DEVICE, 32, 0, 0, 1), Dense());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->cpu_ffn_rows.empty());
  EXPECT_EQ(s->cpu_experts, "none");
}

TEST(ServingSettingsTest, PoliciesThatDoNotFitTheModelOrTheWorkersAreRefused) {
  const ModelConfig c = Dense();
  // Wrong layer count.
  EXPECT_EQ(SettingsFromPolicy(Uniform(proto::SCHEINFER, 31, 1, 0, 0), c).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Shares not summing to 1, or negative.
  EXPECT_EQ(SettingsFromPolicy(Uniform(proto::SCHEINFER, 32, 0.5, 0.2, 0.2), c).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SettingsFromPolicy(Uniform(proto::SCHEINFER, 32, 1.2, -0.2, 0), c).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A whole MLP on the CPU.
  absl::Status st = SettingsFromPolicy(Uniform(proto::SCHEINFER, 32, 0, 0, 1), c).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("whole MLP"), std::string::npos) << st;
  // Another KV block size.
  proto::Policy p = Uniform(proto::GPU_RESIDENT, 32, 1, 0, 0);
  p.set_kv_block_tokens(32);
  EXPECT_EQ(SettingsFromPolicy(p, c).status().code(), absl::StatusCode::kInvalidArgument);
  // Klotski shares experts: a dense model has none.
  st = SettingsFromPolicy(Uniform(proto::KLOTSKI, 32, 0, 1, 0), c).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // MoE-Lightning's CPU attention needs CPU KV blocks.
  p = Uniform(proto::MOE_LIGHTNING, 32, 0.1, 0.9, 0);
  p.set_attention_on_gpu(false);
  st = SettingsFromPolicy(p, c).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("CPU KV"), std::string::npos) << st;
  p.set_cpu_kv_blocks(64);
  p.set_micro_batch_size(-1);
  EXPECT_EQ(SettingsFromPolicy(p, c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServingSettingsTest, MoeLightningStreamsItsWeightsInMicroBatchesWithCpuAttention) {
  const ModelConfig c = testing::Mixtral8x7B();
  // r_w: a quarter of each layer's experts resident, the rest streamed.
  proto::Policy p = Uniform(proto::MOE_LIGHTNING, 32, 0.25, 0.75, 0);
  p.set_batch_size(64);
  p.set_micro_batch_size(16);
  p.set_num_micro_batches(4);
  p.set_attention_on_gpu(false);
  p.set_ffn_on_gpu(true);
  p.set_cpu_kv_blocks(4096);
  p.set_kv_block_tokens(16);
  absl::StatusOr<ServingSettings> s = SettingsFromPolicy(p, c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->micro_batch_size, 16);
  EXPECT_EQ(s->kv_pool, "cpu");
  EXPECT_EQ(s->cpu_kv_blocks, 4096);
  EXPECT_EQ(s->max_num_seqs, 64);
  EXPECT_EQ(s->streamed_ffn_layers.size(), 32u);
  EXPECT_EQ(s->cpu_experts, "none");
  EXPECT_EQ(s->expert_cache_slots, 0);
  // Attention on the GPU, one micro-batch, FFN on the CPU: no pipeline, KV
  // where the service puts it, the non-resident experts on the cpu_workers.
  p = Uniform(proto::MOE_LIGHTNING, 32, 0.5, 0, 0.5);
  p.set_batch_size(8);
  p.set_micro_batch_size(8);
  p.set_attention_on_gpu(true);
  s = SettingsFromPolicy(p, c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->micro_batch_size, 0);
  EXPECT_EQ(s->kv_pool, "auto");
  EXPECT_EQ(s->cpu_experts, "4-per-layer");
  EXPECT_TRUE(s->streamed_ffn_layers.empty());
}

TEST(ServingSettingsTest, NeoPipelinesItsSubBatchesWhenThePolicySaysTwo) {
  proto::Policy p = Uniform(proto::NEO, 32, 1, 0, 0);
  p.set_cpu_kv_blocks(1000);
  p.set_num_micro_batches(2);
  absl::StatusOr<ServingSettings> s = SettingsFromPolicy(p, Dense());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->neo_sub_batches);
  EXPECT_EQ(s->cpu_kv_blocks, 1000);
  EXPECT_EQ(s->kv_pool, "auto");
  EXPECT_EQ(s->micro_batch_size, 0);
  p.set_num_micro_batches(1);  // GPU-only won
  s = SettingsFromPolicy(p, Dense());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->neo_sub_batches);
}

TEST(ServingSettingsTest, KlotskiRunsEveryExpertOnTheDeviceThroughTheCache) {
  const ModelConfig c = testing::Mixtral8x7B();
  proto::Policy p = Uniform(proto::KLOTSKI, 32, 0, 1, 0);
  p.set_batch_size(60);  // n = 5 batches of 12
  p.set_pipeline_batches(5);
  p.set_hot_experts(3);
  p.set_cpu_kv_blocks(2048);
  absl::StatusOr<ServingSettings> s = SettingsFromPolicy(p, c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->max_num_seqs, 60);
  EXPECT_EQ(s->expert_cache_slots, 3);
  EXPECT_EQ(s->expert_prefetch, 3);
  EXPECT_TRUE(s->gpu_experts_only);
  EXPECT_EQ(s->cpu_experts, "none");
  EXPECT_TRUE(s->streamed_ffn_layers.empty());
  EXPECT_EQ(s->micro_batch_size, 0);
  EXPECT_EQ(s->kv_pool, "cpu");
  // No hot experts: still one slot, the one each load goes through.
  p.set_hot_experts(0);
  p.set_cpu_kv_blocks(0);
  p.set_gpu_kv_blocks(512);
  s = SettingsFromPolicy(p, c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->expert_cache_slots, 1);
  EXPECT_EQ(s->kv_pool, "auto");
  EXPECT_EQ(s->kv_blocks, 512);
}

TEST(ServingSettingsTest, MoeLayersPlaceTheirShareOfExpertsOnTheCpu) {
  const ModelConfig c = testing::Mixtral8x7B();  // 8 experts
  absl::StatusOr<ServingSettings> s =
      SettingsFromPolicy(Uniform(proto::SCHEINFER, 32, 0.75, 0, 0.25), c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cpu_experts, "2-per-layer");
  EXPECT_TRUE(s->cpu_ffn_rows.empty());  // no dense layer
  proto::Policy p = Uniform(proto::SCHEINFER, 32, 0.75, 0, 0.25);
  p.mutable_layers(5)->set_gg_fraction(0.5);
  p.mutable_layers(5)->set_cc_fraction(0.5);
  s = SettingsFromPolicy(p, c);
  ASSERT_TRUE(s.ok()) << s.status();
  // One count per layer: 2 everywhere but layer 5's 4.
  EXPECT_EQ(s->cpu_experts,
            "2,2,2,2,2,4,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2");
}

TEST(ServingSettingsTest, HybriMoeKeepsItsCacheAndSplitsEveryExpertPerStep) {
  const ModelConfig c = testing::Mixtral8x7B();
  proto::Policy p = Uniform(proto::HYBRIMOE, 32, 0.5, 0, 0.5);
  for (int l = 0; l < 32; ++l) p.mutable_layers(l)->set_expert_cache_slots(l == 3 ? 5 : 4);
  absl::StatusOr<ServingSettings> s = SettingsFromPolicy(p, c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cpu_experts, "all");
  EXPECT_EQ(s->expert_cache_slots, 5);  // the service's cache is uniform: the largest
  // No slots: every routed expert on the cpu_workers.
  s = SettingsFromPolicy(Uniform(proto::HYBRIMOE, 32, 0, 0, 1), c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cpu_experts, "all");
  EXPECT_EQ(s->expert_cache_slots, 0);
  EXPECT_EQ(SettingsFromPolicy(p, Dense()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServingSettingsTest, ReadsAPlanReportOrABarePolicy) {
  const std::string bare =
      R"({"family": "SCHEINFER", "batch_size": "4",
          "layers": [{"layer": 0, "gg_fraction": 1}]})";
  absl::StatusOr<proto::Policy> p = ParsePolicyJson(bare);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->family(), proto::SCHEINFER);
  EXPECT_EQ(p->batch_size(), 4);
  absl::StatusOr<proto::Policy> r = ParsePolicyJson(R"({"model": "x", "best": )" + bare + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->layers_size(), 1);
  for (const char* bad : {"", "[1]", "{\"family\": \"NO_SUCH\"}", "{\"batch_size\": 3}",
                          "{\"family\": \"NEO\", \"unknown_field\": 1}", "{\"best\": 3}"}) {
    EXPECT_EQ(ParsePolicyJson(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ServingSettingsTest, EveryFamilyTheSearchReturnsIsServed) {
  // The searched policies themselves, through the JSON `tandem plan` prints:
  // LLaMA-2-70B on an A6000 (ScheInfer splits its MLPs) and Mixtral-8x7B
  // on MoE-Lightning's T4.
  for (const auto& [name, profile] : {std::pair<const char*, const char*>{"llama-2-70b", "a6000-xeon8358"},
                                      {"mixtral-8x7b", "t4-xeon24"}}) {
    absl::StatusOr<ModelConfig> c = testing::ShippedModel(name);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<ModelCost> m = ModelCost::Create(*c, {});
    ASSERT_TRUE(m.ok()) << m.status();
    absl::StatusOr<HardwareProfile> h = testing::ShippedProfile(profile);
    ASSERT_TRUE(h.ok()) << h.status();
    Workload w{.prompt_len = 128, .gen_len = 32};
    absl::StatusOr<SearchResult> r = SearchPolicy(*m, *h, w, {});
    ASSERT_TRUE(r.ok()) << r.status();
    int served = 0;
    for (const FamilyOutcome& o : r->outcomes) {
      if (!o.status.ok()) continue;
      // This family's policy in the report's place of the best one.
      std::string policy_json;
      google::protobuf::util::JsonPrintOptions jo;
      jo.preserve_proto_field_names = true;
      ASSERT_TRUE(
          google::protobuf::util::MessageToJsonString(o.plan.policy, &policy_json, jo).ok());
      nlohmann::json report = PlanReportJson(*r, *m, *h, w);
      report["best"] = nlohmann::json::parse(policy_json);
      absl::StatusOr<proto::Policy> back = ParsePolicyJson(report.dump());
      ASSERT_TRUE(back.ok()) << name << " " << FamilyName(o.family) << ": " << back.status();
      absl::StatusOr<ServingSettings> s = SettingsFromPolicy(*back, *c);
      const proto::ScheduleFamily f = o.family;
      ASSERT_TRUE(s.ok()) << name << " " << FamilyName(f) << ": " << s.status();
      ++served;
      if (f == proto::MOE_LIGHTNING) {
        EXPECT_EQ(s->micro_batch_size,
                  back->num_micro_batches() > 1 ? back->micro_batch_size() : 0);
        EXPECT_EQ(s->kv_pool, back->attention_on_gpu() ? "auto" : "cpu");
      }
      if (f == proto::KLOTSKI) {
        EXPECT_TRUE(s->gpu_experts_only);
        EXPECT_GE(s->expert_cache_slots, 1);
      }
      if (f == proto::SCHEINFER && !c->is_moe()) {
        // Each dense layer's CPU rows are its CC share, to within a block.
        if (!s->cpu_ffn_rows.empty()) {
          ASSERT_EQ(s->cpu_ffn_rows.size(), static_cast<size_t>(c->num_layers));
        }
        for (size_t l = 0; l < s->cpu_ffn_rows.size(); ++l) {
          const double want = back->layers(static_cast<int>(l)).cc_fraction() *
                              static_cast<double>(c->intermediate_size);
          EXPECT_LE(static_cast<double>(s->cpu_ffn_rows[l]), want + 1e-9) << l;
          EXPECT_GT(static_cast<double>(s->cpu_ffn_rows[l]), want - 32) << l;
        }
      }
      std::printf("%-13s %-14s cpu rows %zu layers, %zu streamed, cpu experts %s, slots %d, "
                  "N %lld, mu %lld, kv pool %s\n",
                  name, FamilyName(f).c_str(), s->cpu_ffn_rows.size(),
                  s->streamed_ffn_layers.size(), s->cpu_experts.c_str(), s->expert_cache_slots,
                  static_cast<long long>(s->max_num_seqs),
                  static_cast<long long>(s->micro_batch_size), s->kv_pool.c_str());
    }
    EXPECT_GT(served, 0) << name;
  }
}

}  // namespace
}  // namespace tandem::planner
