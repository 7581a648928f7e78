// LoadModel's weight placement: a weight budget or a list of streamed layers
// in the request reaches the engine (its FFN weights streamed through the
// pager), steps give the resident load's tokens, and bad values are refused.
#include "gpu_worker/service/model_loader.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

proto::LoadModelRequest Request(const std::string& model) {
  proto::LoadModelRequest req;
  req.set_model_path(std::string(TANDEM_TESTDATA_DIR) + "/models/" + model);
  req.set_max_context(64);
  req.set_kv_blocks(16);
  req.set_block_size(8);
  return req;
}

std::vector<int32_t> Greedy(StepExecutor& ex) {
  std::vector<int32_t> out;
  std::vector<int32_t> tokens = {5, 9, 13, 2, 7};
  int64_t pos = 0;
  for (int step = 0; step < 6; ++step) {
    proto::StepPlan plan;
    plan.set_step(step);
    proto::StepSequence* s = plan.add_sequences();
    s->set_seq_id(1);
    for (int32_t t : tokens) s->add_tokens(t);
    s->set_start_pos(pos);
    s->set_sample(true);
    s->mutable_sampling()->set_top_p(1.0f);
    auto r = ex.Run(plan);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    pos += static_cast<int64_t>(tokens.size());
    tokens = {r->results(0).token()};
    out.push_back(tokens[0]);
  }
  return out;
}

TEST(ModelLoaderPlacement, StreamedLayersReachTheEngineAndKeepTheTokens) {
  auto resident = LoadModelForWorker(Request("qwen2_moe_f32"));
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_EQ(resident->executor->engine().weight_pager(), nullptr);
  const std::vector<int32_t> want = Greedy(*resident->executor);

  proto::LoadModelRequest listed = Request("qwen2_moe_f32");
  listed.add_streamed_ffn_layers(0);
  listed.add_streamed_ffn_layers(2);
  auto streamed = LoadModelForWorker(listed);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  const WeightPager* pager = streamed->executor->engine().weight_pager();
  ASSERT_NE(pager, nullptr);
  ASSERT_EQ(pager->layers().size(), 2u);
  EXPECT_EQ(pager->layers()[0].layer, 0);
  EXPECT_EQ(pager->layers()[1].layer, 2);
  EXPECT_EQ(Greedy(*streamed->executor), want);

  proto::LoadModelRequest budget = Request("qwen2_moe_f32");
  budget.set_weight_budget_bytes(1);  // holds nothing
  EXPECT_EQ(LoadModelForWorker(budget).status().code(), absl::StatusCode::kResourceExhausted);
  budget.set_weight_budget_bytes(-1);
  EXPECT_EQ(LoadModelForWorker(budget).status().code(), absl::StatusCode::kInvalidArgument);
  proto::LoadModelRequest bad = Request("qwen2_moe_f32");
  bad.add_streamed_ffn_layers(3);
  EXPECT_EQ(LoadModelForWorker(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// The expert cache loads with its CPU share in process, or on cpu_workers
// only if they hold every expert; a partial placement is refused before
// any ring is made.
TEST(ModelLoaderPlacement, TheExpertCacheNeedsEveryExpertOnTheCpuWorkers) {
  auto resident = LoadModelForWorker(Request("qwen2_moe_f32"));
  ASSERT_TRUE(resident.ok()) << resident.status();
  const std::vector<int32_t> want = Greedy(*resident->executor);
  proto::LoadModelRequest cached = Request("qwen2_moe_f32");
  cached.set_expert_cache_slots(1);
  auto m = LoadModelForWorker(cached);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_NE(m->executor->engine().expert_cache(), nullptr);
  EXPECT_EQ(Greedy(*m->executor), want);

  proto::LoadModelRequest partial = cached;
  partial.set_data_segment("/tandem-loader-test-never-made");
  for (int l = 0; l < 3; ++l) partial.mutable_cpu_placement()->add_experts()->add_experts(0);
  EXPECT_EQ(LoadModelForWorker(partial).status().code(), absl::StatusCode::kInvalidArgument);
  cached.set_expert_cache_slots(-1);
  EXPECT_EQ(LoadModelForWorker(cached).status().code(), absl::StatusCode::kInvalidArgument);
}

// Klotski's cache: every expert on the device, more prefetched; and
// MoE-Lightning's micro-batches. Neither changes the tokens.
TEST(ModelLoaderPlacement, KlotskiCacheAndMicroBatchesReachTheEngine) {
  auto resident = LoadModelForWorker(Request("qwen2_moe_f32"));
  ASSERT_TRUE(resident.ok()) << resident.status();
  const std::vector<int32_t> want = Greedy(*resident->executor);
  proto::LoadModelRequest klotski = Request("qwen2_moe_f32");
  klotski.set_expert_cache_slots(1);
  klotski.set_experts_on_device_only(true);
  klotski.set_expert_prefetch(2);
  auto k = LoadModelForWorker(klotski);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(Greedy(*k->executor), want);
  const LayerResidencyStats st = k->executor->engine().expert_cache()->residency().Stats().total;
  EXPECT_GT(st.loads, 0);
  EXPECT_EQ(st.cpu_computed, 0);
  EXPECT_EQ(st.gpu_computed, st.activations);

  proto::LoadModelRequest mb = Request("qwen2_moe_f32");
  mb.set_micro_batch_size(1);
  auto m = LoadModelForWorker(mb);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->executor->engine().micro_batch_size(), 1);
  EXPECT_EQ(Greedy(*m->executor), want);

  // Not without the cache; micro-batches not with it; nothing negative.
  proto::LoadModelRequest bad = Request("qwen2_moe_f32");
  bad.set_experts_on_device_only(true);
  EXPECT_EQ(LoadModelForWorker(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = klotski;
  bad.set_micro_batch_size(2);
  EXPECT_EQ(LoadModelForWorker(bad).status().code(), absl::StatusCode::kFailedPrecondition);
  bad = mb;
  bad.set_micro_batch_size(-1);
  EXPECT_EQ(LoadModelForWorker(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
