// The attention server allocates its cache from the gpu_worker's configure
// request, computes attention as the reference does, applies frees before a
// request's sequences, and answers every bad request with an error reply
// carrying the right code, never a crash.
#include "cpu_worker/service/attention_server.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/checkpoint.h"
#include "common/shm/attention_wire.h"
#include "cpu_worker/ops/attention.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

ModelConfig Config() {
  auto c = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/qwen2_f32");
  EXPECT_TRUE(c.ok()) << c.status();
  return (*c)->config();
}

wire::AttentionRequestHeader Header(const ModelConfig& c, wire::AttentionOp op) {
  wire::AttentionRequestHeader h;
  h.op = static_cast<int32_t>(op);
  h.heads = static_cast<int32_t>(c.num_heads);
  h.kv_heads = static_cast<int32_t>(c.num_kv_heads);
  h.head_dim = static_cast<int32_t>(c.head_dim);
  h.batch_id = 3;
  return h;
}

std::vector<uint8_t> Configure(const ModelConfig& c, int64_t capacity) {
  wire::AttentionRequestHeader h = Header(c, wire::AttentionOp::kConfigure);
  h.num_layers = c.num_layers;
  h.block_size = 16;
  h.capacity_tokens = capacity;
  h.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<uint8_t> buf(static_cast<size_t>(wire::AttentionRowsOffset(0, 0)));
  std::memcpy(buf.data(), &h, sizeof(h));
  return buf;
}

// One sequence's attend request; rows = q, then k, then v, of e.tokens tokens.
std::vector<uint8_t> Attend(const ModelConfig& c, int32_t layer,
                            const std::vector<int64_t>& frees, wire::AttentionSeqEntry e,
                            const std::vector<float>& rows) {
  wire::AttentionRequestHeader h = Header(c, wire::AttentionOp::kAttend);
  h.layer = layer;
  h.num_seqs = 1;
  h.num_frees = static_cast<int32_t>(frees.size());
  h.total_tokens = e.tokens;
  const int64_t n = static_cast<int64_t>(frees.size());
  std::vector<uint8_t> buf(static_cast<size_t>(
      wire::AttentionRequestBytes(n, 1, e.tokens, c.q_dim(), c.kv_dim())));
  std::memcpy(buf.data(), &h, sizeof(h));
  if (n > 0) std::memcpy(buf.data() + sizeof(h), frees.data(), static_cast<size_t>(n) * 8);
  std::memcpy(buf.data() + sizeof(h) + n * 8, &e, sizeof(e));
  EXPECT_EQ(static_cast<int64_t>(rows.size()), e.tokens * (c.q_dim() + 2 * c.kv_dim()));
  std::memcpy(buf.data() + wire::AttentionRowsOffset(n, 1), rows.data(),
              std::min(rows.size() * 4, buf.size() - static_cast<size_t>(wire::AttentionRowsOffset(n, 1))));
  return buf;
}

int32_t Code(AttentionServer& s, const std::vector<uint8_t>& req, std::vector<uint8_t>& reply) {
  const int64_t n = s.Handle(req, absl::MakeSpan(reply));
  auto r = wire::ParseAttentionReply(absl::MakeConstSpan(reply.data(), static_cast<size_t>(n)));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->header.status_code : -1;
}

TEST(AttentionServer, ConfiguresThenComputesTheReferenceAttention) {
  const ModelConfig c = Config();
  auto server = AttentionServer::Create(c, 0);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<uint8_t> reply(1 << 20);
  EXPECT_EQ(Code(**server, Configure(c, 64), reply), 0);
  ASSERT_NE((*server)->attention(), nullptr);

  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  const int64_t n = 5;
  std::vector<float> rows(static_cast<size_t>(n * (c.q_dim() + 2 * c.kv_dim())));
  for (auto& x : rows) x = dist(rng);
  const int64_t got = (*server)->Handle(Attend(c, 1, {}, {42, 0, n}, rows), absl::MakeSpan(reply));
  auto r = wire::ParseAttentionReply(absl::MakeConstSpan(reply.data(), static_cast<size_t>(got)));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->header.status_code, 0) << r->error;
  ASSERT_EQ(r->header.total_tokens, n);
  std::vector<float> ref(static_cast<size_t>(n * c.q_dim()));
  const float* q = rows.data();
  const float* k = q + n * c.q_dim();
  const float* v = k + n * c.kv_dim();
  ops::ReferenceAttention(q, n, c.num_heads, k, v, c.num_kv_heads, c.head_dim, 0,
                          1.0f / std::sqrt(static_cast<float>(c.head_dim)), ref.data());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(r->out[i], ref[i], 2e-5f) << i;
  EXPECT_EQ((*server)->attention()->cache().Written(42, 1), n);

  // A free listed in a request goes first: id 42 starts again at 0.
  const std::vector<float> one(rows.begin(), rows.begin() + c.q_dim() + 2 * c.kv_dim());
  EXPECT_EQ(Code(**server, Attend(c, 1, {42}, {42, 0, 1}, one), reply), 0);
  EXPECT_EQ((*server)->attention()->cache().Written(42, 1), 1);
}

TEST(AttentionServer, BadRequestsGetErrorReplies) {
  const ModelConfig c = Config();
  auto server = AttentionServer::Create(c, 32);
  ASSERT_TRUE(server.ok());
  std::vector<uint8_t> reply(1 << 20);
  std::vector<float> rows(static_cast<size_t>(2 * (c.q_dim() + 2 * c.kv_dim())), 0.5f);
  auto code = [](absl::StatusCode k) { return static_cast<int32_t>(k); };
  // Attend before the cache exists.
  EXPECT_EQ(Code(**server, Attend(c, 0, {}, {1, 0, 2}, rows), reply),
            code(absl::StatusCode::kFailedPrecondition));
  // More than --cpu-kv-tokens.
  EXPECT_EQ(Code(**server, Configure(c, 64), reply), code(absl::StatusCode::kResourceExhausted));
  // A shape of another model.
  std::vector<uint8_t> other = Configure(c, 32);
  reinterpret_cast<wire::AttentionRequestHeader*>(other.data())->num_layers = c.num_layers + 1;
  EXPECT_EQ(Code(**server, other, reply), code(absl::StatusCode::kInvalidArgument));
  ASSERT_EQ(Code(**server, Configure(c, 32), reply), 0);
  // Garbage, a gap in positions, a layer past the model, a full cache.
  std::vector<uint8_t> junk(100, 0xab);
  EXPECT_EQ(Code(**server, junk, reply), code(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Code(**server, Attend(c, 0, {}, {1, 3, 2}, rows), reply),
            code(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Code(**server, Attend(c, static_cast<int32_t>(c.num_layers), {}, {1, 0, 2}, rows),
                 reply),
            code(absl::StatusCode::kInvalidArgument));
  std::vector<float> big(static_cast<size_t>(40 * (c.q_dim() + 2 * c.kv_dim())), 0.5f);
  EXPECT_EQ(Code(**server, Attend(c, 0, {}, {1, 0, 40}, big), reply),
            code(absl::StatusCode::kResourceExhausted));
  // A reply slot too small for the rows.
  std::vector<uint8_t> small(256);
  EXPECT_EQ(Code(**server, Attend(c, 0, {}, {1, 0, 2}, rows), small),
            code(absl::StatusCode::kResourceExhausted));
  // Still serving.
  EXPECT_EQ(Code(**server, Attend(c, 0, {}, {1, 0, 2}, rows), reply), 0);
}

}  // namespace
}  // namespace tandem
