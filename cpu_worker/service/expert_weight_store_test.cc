// The cpu_worker's experts held in a host weight store: the server computing
// from the store answers exactly as the one computing from the checkpoint,
// and the gpu_worker's check accepts the store for its placement only.
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/expert_wire.h"
#include "common/shm/expert_weight_store.h"
#include "cpu_worker/service/expert_server.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

std::vector<uint8_t> OneJobRequest(int32_t layer, int32_t expert, int64_t rows, int64_t hidden,
                                   const std::vector<float>& x) {
  std::vector<uint8_t> buf(static_cast<size_t>(wire::RequestBytes(1, rows, hidden)));
  wire::ExpertRequestHeader h;
  h.layer = layer;
  h.num_jobs = 1;
  h.hidden = hidden;
  h.total_rows = rows;
  h.batch_id = 3;
  std::memcpy(buf.data(), &h, sizeof(h));
  wire::ExpertJobEntry e;
  e.expert = expert;
  e.rows = rows;
  std::memcpy(buf.data() + sizeof(h), &e, sizeof(e));
  std::memcpy(buf.data() + wire::RequestRowsOffset(1), x.data(), x.size() * 4);
  return buf;
}

class ExpertWeightStoreTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertWeightStoreTest, ServerFromTheStoreMatchesTheCheckpointServer) {
  auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + GetParam());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const ModelConfig& c = (*ckpt)->config();
  auto placement = ParseCpuExperts("2-per-layer", c);
  ASSERT_TRUE(placement.ok());
  const std::string name = absl::StrCat("/tandem-test-", getpid(), "-", GetParam(), "-weights");
  auto store = shm::BuildExpertWeightStore(**ckpt, *placement, name);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->num_tensors(), 3 * 2 * c.num_layers);
  // The gpu_worker's view: the store opened by name, checked against the
  // checkpoint for this placement.
  auto mapped = shm::HostWeightStore::Open(name);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_TRUE(shm::VerifyExpertWeightStore(**mapped, **ckpt, *placement).ok());
  auto all = ParseCpuExperts("all", c);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(shm::VerifyExpertWeightStore(**mapped, **ckpt, *all)));

  for (auto ct : {ops::ComputeType::kF32, ops::ComputeType::kBF16}) {
    auto from_ckpt = ExpertServer::Create(**ckpt, *placement, ct);
    auto from_store = ExpertServer::CreateFromStore(**store, c, *placement, ct);
    ASSERT_TRUE(from_ckpt.ok()) << from_ckpt.status();
    ASSERT_TRUE(from_store.ok()) << from_store.status();
    const uint32_t seed = std::random_device{}();
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    std::vector<float> x(static_cast<size_t>(4 * c.hidden_size));
    for (auto& v : x) v = dist(rng);
    for (int32_t e : {0, 1}) {
      auto req = OneJobRequest(static_cast<int32_t>(c.num_layers - 1), e, 4, c.hidden_size, x);
      std::vector<uint8_t> a(1 << 20), b(1 << 20);
      const int64_t na = (*from_ckpt)->Handle(req, absl::MakeSpan(a));
      const int64_t nb = (*from_store)->Handle(req, absl::MakeSpan(b));
      ASSERT_EQ(na, nb);
      auto ra = wire::ParseReply(absl::MakeConstSpan(a.data(), static_cast<size_t>(na)));
      auto rb = wire::ParseReply(absl::MakeConstSpan(b.data(), static_cast<size_t>(nb)));
      ASSERT_TRUE(ra.ok() && rb.ok());
      ASSERT_EQ(ra->header.status_code, 0) << ra->error;
      ASSERT_EQ(rb->header.status_code, 0) << rb->error;
      for (int64_t i = 0; i < 4 * c.hidden_size; ++i) {
        ASSERT_EQ(ra->rows[i], rb->rows[i]) << "expert " << e << " seed " << seed;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MoeModels, ExpertWeightStoreTest,
                         ::testing::Values("mixtral_f32", "qwen3_moe_bf16", "olmoe_f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
