// The expert server computes exactly the expert MLPs of its placement, and
// answers malformed or misplaced requests with an error reply, never a crash.
#include "cpu_worker/service/expert_server.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/expert_wire.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

std::unique_ptr<Checkpoint> Open(const std::string& name) {
  auto c = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + name);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

std::vector<uint8_t> Request(int32_t layer, const std::vector<std::pair<int32_t, int64_t>>& jobs,
                             int64_t hidden, const std::vector<float>& rows) {
  int64_t total = 0;
  for (auto& j : jobs) total += j.second;
  std::vector<uint8_t> buf(static_cast<size_t>(wire::RequestBytes(
      static_cast<int64_t>(jobs.size()), total, hidden)));
  wire::ExpertRequestHeader h;
  h.layer = layer;
  h.num_jobs = static_cast<int32_t>(jobs.size());
  h.hidden = hidden;
  h.total_rows = total;
  h.batch_id = 9;
  std::memcpy(buf.data(), &h, sizeof(h));
  for (size_t i = 0; i < jobs.size(); ++i) {
    wire::ExpertJobEntry e;
    e.expert = jobs[i].first;
    e.rows = jobs[i].second;
    std::memcpy(buf.data() + sizeof(h) + i * sizeof(e), &e, sizeof(e));
  }
  std::memcpy(buf.data() + wire::RequestRowsOffset(static_cast<int64_t>(jobs.size())),
              rows.data(), rows.size() * 4);
  return buf;
}

TEST(ExpertServer, ComputesItsExpertsAsTheReferenceMlp) {
  auto ckpt = Open("mixtral_f32");
  const auto& c = ckpt->config();
  auto placement = ParseCpuExperts("2-per-layer", c);
  ASSERT_TRUE(placement.ok());
  auto server = ExpertServer::Create(*ckpt, *placement, ops::ComputeType::kF32);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->num_experts_held(), 2 * c.num_layers);

  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> rows(static_cast<size_t>(5 * c.hidden_size));
  for (auto& v : rows) v = dist(rng);
  auto req = Request(1, {{0, 3}, {1, 2}}, c.hidden_size, rows);
  std::vector<uint8_t> reply(1 << 20);
  const int64_t n = (*server)->Handle(req, absl::MakeSpan(reply));
  auto r = wire::ParseReply(absl::MakeConstSpan(reply.data(), static_cast<size_t>(n)));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->header.status_code, 0) << r->error;
  EXPECT_EQ(r->header.batch_id, 9u);

  ops::MlpScratch scratch;
  for (int e = 0; e < 2; ++e) {
    auto m = ops::LoadExpertMlp(*ckpt, 1, e, ops::ComputeType::kF32);
    ASSERT_TRUE(m.ok());
    const int64_t first = e == 0 ? 0 : 3, count = e == 0 ? 3 : 2;
    std::vector<float> want(static_cast<size_t>(count * c.hidden_size));
    ops::RunMlp(*m, rows.data() + first * c.hidden_size, count, want.data(), scratch);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(r->rows[first * c.hidden_size + static_cast<int64_t>(i)], want[i])
          << "expert " << e << " seed " << seed;
    }
  }
}

TEST(ExpertServer, ErrorRepliesForBadRequests) {
  auto ckpt = Open("mixtral_f32");
  const auto& c = ckpt->config();
  auto server = ExpertServer::Create(*ckpt, *ParseCpuExperts("1-per-layer", c),
                                     ops::ComputeType::kF32);
  ASSERT_TRUE(server.ok());
  std::vector<uint8_t> reply(1 << 16);
  auto code_of = [&](std::vector<uint8_t> req) {
    const int64_t n = (*server)->Handle(req, absl::MakeSpan(reply));
    auto r = wire::ParseReply(absl::MakeConstSpan(reply.data(), static_cast<size_t>(n)));
    EXPECT_TRUE(r.ok());
    return static_cast<absl::StatusCode>(r->header.status_code);
  };
  std::vector<float> row(static_cast<size_t>(c.hidden_size), 1.0f);
  // An expert held elsewhere.
  EXPECT_EQ(code_of(Request(0, {{3, 1}}, c.hidden_size, row)),
            absl::StatusCode::kFailedPrecondition);
  // Wrong hidden size.
  EXPECT_EQ(code_of(Request(0, {{0, 1}}, c.hidden_size / 2,
                            std::vector<float>(static_cast<size_t>(c.hidden_size / 2)))),
            absl::StatusCode::kInvalidArgument);
  // Truncated and garbage messages.
  auto good = Request(0, {{0, 1}}, c.hidden_size, row);
  for (size_t cut : {size_t{0}, size_t{3}, sizeof(wire::ExpertRequestHeader), good.size() - 4}) {
    EXPECT_EQ(code_of(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(cut))),
              absl::StatusCode::kInvalidArgument)
        << "cut at " << cut;
  }
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int i = 0; i < 500; ++i) {
    auto bad = good;
    bad[rng() % sizeof(wire::ExpertRequestHeader) + 4] ^= static_cast<uint8_t>(1 + rng() % 255);
    (*server)->Handle(bad, absl::MakeSpan(reply));  // must not crash
  }
}

TEST(ExpertServer, PlacementSpecs) {
  auto ckpt = Open("qwen2_moe_f32");  // layer 1 is dense
  const auto& c = ckpt->config();
  auto all = ParseCpuExperts("all", c);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)[0].size(), static_cast<size_t>(c.num_experts));
  EXPECT_TRUE((*all)[1].empty());
  EXPECT_TRUE(ParseCpuExperts("none", c)->at(0).empty());
  EXPECT_EQ(ParseCpuExperts("3-per-layer", c)->at(2).size(), 3u);
  // One count per layer (a dense layer's count places nothing).
  std::string per_layer;
  for (int64_t l = 0; l < c.num_layers; ++l) absl::StrAppend(&per_layer, l == 0 ? "" : ",", l % 3);
  auto listed = ParseCpuExperts(per_layer, c);
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    EXPECT_EQ((*listed)[static_cast<size_t>(l)].size(), c.IsMoeLayer(l) ? static_cast<size_t>(l % 3) : 0u);
  }
  const std::string too_few = per_layer.substr(0, per_layer.rfind(','));
  const std::string too_many = absl::StrCat(per_layer, ",1");
  const std::string bad_count = absl::StrCat("99", per_layer.substr(per_layer.find(',')));
  for (const std::string& bad : {too_few, too_many, bad_count, std::string("1,x")}) {
    EXPECT_EQ(ParseCpuExperts(bad, c).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Every expert of the first N layers (llama.cpp's --n-cpu-moe); N past the
  // last layer is all of them, 0 none.
  for (int64_t n : {int64_t{0}, int64_t{1}, c.num_layers, c.num_layers + 50}) {
    auto first = ParseCpuExperts(absl::StrCat("first-", n, "-layers"), c);
    ASSERT_TRUE(first.ok()) << first.status();
    for (int64_t l = 0; l < c.num_layers; ++l) {
      EXPECT_EQ((*first)[static_cast<size_t>(l)].size(),
                l < n && c.IsMoeLayer(l) ? static_cast<size_t>(c.num_experts) : 0u)
          << "n " << n << " layer " << l;
    }
  }
  for (const char* bad : {"some", "-1-per-layer", "99-per-layer", "2-per", "", "first--1-layers",
                          "first-x-layers", "first-2", "2-layers"}) {
    EXPECT_EQ(ParseCpuExperts(bad, c).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace tandem
