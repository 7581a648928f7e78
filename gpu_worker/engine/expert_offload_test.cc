// The engine with part of its experts offloaded gives the logits of the
// all-local engine, for every MoE architecture; a failing offload fails the
// step with its status and leaves the sequence able to run again.
#include <cmath>
#include <string>

#include "common/checkpoint.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/local_expert_offload.h"
#include "gpu_worker/engine/sharded_expert_offload.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

std::unique_ptr<Engine> Load(const std::string& name) {
  auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + name);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  EngineOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

std::vector<float> Logits(Engine& e, int64_t seq) {
  SequenceChunk c{seq, {3, 14, 15, 92, 65, 35, 89, 79, 32, 38}, 0, true};
  auto r = e.Step({c});
  EXPECT_TRUE(r.ok()) << r.status();
  e.FreeSequence(seq);
  return r.ok() ? r->logits : std::vector<float>{};
}

class ExpertOffloadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertOffloadTest, HalfTheExpertsOffloadedGiveTheSameLogits) {
  auto engine = Load(GetParam());
  const auto want = Logits(*engine, 1);
  LocalExpertOffload offload(&engine->weights(),
                             [](int64_t layer, int64_t e) { return (e + layer) % 2 == 1; });
  engine->SetExpertOffload(&offload);
  const auto got = Logits(*engine, 2);
  ASSERT_EQ(got.size(), want.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LT(diff / ref, 1e-5);
}

// The experts an offload computes need not be loaded by the engine at all
// (the gpu_worker does not hold what its cpu_workers compute).
TEST_P(ExpertOffloadTest, RemoteExpertsAreNotLoadedAndGiveTheSameLogits) {
  auto full = Load(GetParam());  // all experts: the offload computes from these
  const auto want = Logits(*full, 1);
  auto remote = [](int64_t layer, int64_t e) { return (e + layer) % 2 == 1; };
  const ModelConfig& c = full->config();
  EngineOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  o.remote_experts.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    for (int32_t e = 0; e < c.num_experts; ++e) {
      if (remote(l, e)) o.remote_experts[static_cast<size_t>(l)].push_back(e);
    }
  }
  auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + GetParam());
  ASSERT_TRUE(ckpt.ok());
  auto engine = Engine::Create(std::move(*ckpt), o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    for (int32_t e = 0; e < c.num_experts; ++e) {
      EXPECT_EQ((*engine)->weights().layers[l].experts[e].gate.rows() == 0, remote(l, e))
          << "layer " << l << " expert " << e;
    }
  }
  // Without the offload the step cannot run, and keeps nothing.
  SequenceChunk chunk{5, {3, 14, 15}, 0, true};
  auto r = (*engine)->Step({chunk});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ((*engine)->SequenceLength(5), 0);
  // An offload that claims fewer experts than were left out is caught.
  LocalExpertOffload too_few(&full->weights(), [](int64_t, int64_t) { return false; });
  (*engine)->SetExpertOffload(&too_few);
  r = (*engine)->Step({chunk});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ((*engine)->SequenceLength(5), 0);

  LocalExpertOffload offload(&full->weights(), remote);
  (*engine)->SetExpertOffload(&offload);
  const auto got = Logits(**engine, 2);
  ASSERT_EQ(got.size(), want.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LT(diff / ref, 1e-5);

  // A remote expert the model does not have is refused at Create.
  EngineOptions bad = o;
  bad.remote_experts = {{static_cast<int32_t>(c.num_experts)}};
  auto ckpt2 = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + GetParam());
  ASSERT_TRUE(ckpt2.ok());
  EXPECT_EQ(Engine::Create(std::move(*ckpt2), bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(ExpertOffloadTest, ExpertsShardedOverThreeOffloadsGiveTheSameLogits) {
  auto engine = Load(GetParam());
  const auto want = Logits(*engine, 1);
  std::vector<std::unique_ptr<ExpertOffload>> shards;
  std::vector<int> calls(3, 0);
  for (int64_t i = 0; i < 3; ++i) {
    // Each shard only claims its own experts: a job routed to the wrong
    // shard would be computed by nobody and change the logits.
    shards.push_back(std::make_unique<LocalExpertOffload>(
        &engine->weights(), [i, &calls](int64_t, int64_t e) {
          const bool mine = ExpertShard(e, 3) == i && e != 3;
          calls[static_cast<size_t>(i)] += mine;
          return mine;
        }));
  }
  auto sharded = ShardedExpertOffload::Create(std::move(shards));
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_FALSE((*sharded)->IsRemote(0, 3));  // expert 3 stays local
  EXPECT_TRUE((*sharded)->IsRemote(0, 1));
  engine->SetExpertOffload(sharded->get());
  const auto got = Logits(*engine, 2);
  ASSERT_EQ(got.size(), want.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LT(diff / ref, 1e-5);
  for (int i = 0; i < 3; ++i) EXPECT_GT(calls[static_cast<size_t>(i)], 0) << "shard " << i;
}

TEST(ShardRing, NamesAndPartition) {
  EXPECT_EQ(ShardRingPrefix("/tandem-1-experts", 0, 1), "/tandem-1-experts");
  EXPECT_EQ(ShardRingPrefix("/tandem-1-experts", 1, 2), "/tandem-1-experts-s1");
  const std::vector<std::vector<int32_t>> remote = {{0, 1, 2, 3, 4}, {}, {5, 7}};
  EXPECT_EQ(ShardExperts(remote, 0, 2), (std::vector<std::vector<int32_t>>{{0, 2, 4}, {}, {}}));
  EXPECT_EQ(ShardExperts(remote, 1, 2), (std::vector<std::vector<int32_t>>{{1, 3}, {}, {5, 7}}));
}

class FailingOffload : public ExpertOffload {
 public:
  bool IsRemote(int64_t, int64_t e) const override { return e == 0; }
  absl::Status Submit(int64_t, const std::vector<ExpertJob>&) override {
    return absl::OkStatus();
  }
  absl::Status Collect(int64_t, const std::vector<ExpertJob>&) override {
    return absl::UnavailableError("cpu_worker gone");
  }
};

TEST_P(ExpertOffloadTest, FailingOffloadFailsTheStepCleanly) {
  auto engine = Load(GetParam());
  const auto want = Logits(*engine, 1);
  FailingOffload failing;
  engine->SetExpertOffload(&failing);
  SequenceChunk c{5, {3, 14, 15, 92, 65, 35, 89, 79, 32, 38}, 0, true};
  EXPECT_EQ(engine->Step({c}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(engine->SequenceLength(5), 0);
  // Back to local experts: the same sequence runs from scratch, correctly.
  engine->SetExpertOffload(nullptr);
  auto r = engine->Step({c});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->logits, want);
}

INSTANTIATE_TEST_SUITE_P(MoeModels, ExpertOffloadTest,
                         ::testing::Values("mixtral_f32", "qwen2_moe_f32", "qwen3_moe_f32",
                                           "olmoe_f32", "mixtral_bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
