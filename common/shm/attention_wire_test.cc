// The attention ring's message format: what a producer lays out parses back
// to the same entries and rows; every malformed header, count or size is an
// InvalidArgument, never a read past the message.
#include "common/shm/attention_wire.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::wire {
namespace {

// A request with frees {5, 6} and two sequences (3 and 1 tokens); heads 4,
// kv heads 2, head_dim 2 (q_dim 8, kv_dim 4). Rows count up from 0.
std::vector<uint8_t> GoodRequest(AttentionRequestHeader* header = nullptr) {
  const std::vector<int64_t> frees = {5, 6};
  const std::vector<AttentionSeqEntry> seqs = {{11, 0, 3}, {12, 7, 1}};
  AttentionRequestHeader h;
  h.op = static_cast<int32_t>(AttentionOp::kAttend);
  h.layer = 2;
  h.num_seqs = 2;
  h.num_frees = 2;
  h.heads = 4;
  h.kv_heads = 2;
  h.head_dim = 2;
  h.total_tokens = 4;
  h.batch_id = 77;
  std::vector<uint8_t> buf(static_cast<size_t>(AttentionRequestBytes(2, 2, 4, 8, 4)));
  std::memcpy(buf.data(), &h, sizeof(h));
  std::memcpy(buf.data() + sizeof(h), frees.data(), 16);
  std::memcpy(buf.data() + sizeof(h) + 16, seqs.data(), 2 * sizeof(AttentionSeqEntry));
  float* rows = reinterpret_cast<float*>(buf.data() + AttentionRowsOffset(2, 2));
  for (int i = 0; i < 4 * (8 + 4 + 4); ++i) rows[i] = static_cast<float>(i);
  if (header != nullptr) *header = h;
  return buf;
}

TEST(AttentionWire, RequestRoundTrips) {
  const std::vector<uint8_t> buf = GoodRequest();
  auto v = ParseAttentionRequest(buf);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->header.layer, 2);
  EXPECT_EQ(v->header.batch_id, 77u);
  EXPECT_EQ(v->frees, (std::vector<int64_t>{5, 6}));
  ASSERT_EQ(v->seqs.size(), 2u);
  EXPECT_EQ(v->seqs[1].seq_id, 12);
  EXPECT_EQ(v->seqs[1].start_pos, 7);
  EXPECT_EQ(v->q[0], 0.0f);
  EXPECT_EQ(v->k[0], 32.0f);  // after 4 tokens x 8 q floats
  EXPECT_EQ(v->v[0], 48.0f);  // after 4 tokens x 4 k floats
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v->q) % 64, reinterpret_cast<uintptr_t>(buf.data()) % 64);
}

TEST(AttentionWire, MalformedRequestsAreRejected) {
  auto bad = [](auto mutate) {
    AttentionRequestHeader h;
    std::vector<uint8_t> buf = GoodRequest(&h);
    mutate(h, buf);
    std::memcpy(buf.data(), &h, sizeof(h));
    return ParseAttentionRequest(buf).status().code();
  };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(bad([](auto& h, auto&) { h.magic = 1; }), kBad);
  EXPECT_EQ(bad([](auto& h, auto&) { h.op = 9; }), kBad);
  EXPECT_EQ(bad([](auto& h, auto&) { h.num_seqs = -1; }), kBad);
  EXPECT_EQ(bad([](auto& h, auto&) { h.num_frees = 1 << 30; }), kBad);
  EXPECT_EQ(bad([](auto& h, auto&) { h.heads = 3; }), kBad);  // not a multiple of kv heads
  EXPECT_EQ(bad([](auto& h, auto&) { h.head_dim = 0; }), kBad);
  EXPECT_EQ(bad([](auto& h, auto&) { h.layer = -1; }), kBad);
  EXPECT_EQ(bad([](auto& h, auto&) { h.total_tokens = 5; }), kBad);  // entries hold 4
  EXPECT_EQ(bad([](auto& h, auto&) { h.total_tokens = int64_t{1} << 40; }), kBad);
  EXPECT_EQ(bad([](auto& h, auto&) { h.head_dim = 1 << 19; }), kBad);  // rows past the end
  EXPECT_EQ(bad([](auto&, auto& buf) { buf.resize(buf.size() - 4); }), kBad);
  EXPECT_EQ(bad([](auto&, auto& buf) {
              AttentionSeqEntry e{12, -1, 1};
              std::memcpy(buf.data() + sizeof(AttentionRequestHeader) + 16 + sizeof(e), &e,
                          sizeof(e));
            }),
            kBad);
  EXPECT_EQ(bad([](auto&, auto& buf) {
              AttentionSeqEntry e{12, 0, 0};  // an empty entry
              std::memcpy(buf.data() + sizeof(AttentionRequestHeader) + 16 + sizeof(e), &e,
                          sizeof(e));
            }),
            kBad);
  // A configure request needs a whole shape.
  EXPECT_EQ(bad([](auto& h, auto&) {
              h.op = static_cast<int32_t>(AttentionOp::kConfigure);
              h.num_layers = 2;
              h.block_size = 16;
              h.capacity_tokens = 64;
              h.scale = 0.5f;  // but it carries sequences
            }),
            kBad);
  std::vector<uint8_t> tiny(8, 0);
  EXPECT_EQ(ParseAttentionRequest(tiny).status().code(), kBad);
}

TEST(AttentionWire, ConfigureRequestParses) {
  AttentionRequestHeader h;
  h.op = static_cast<int32_t>(AttentionOp::kConfigure);
  h.heads = 4;
  h.kv_heads = 2;
  h.head_dim = 8;
  h.num_layers = 3;
  h.block_size = 16;
  h.capacity_tokens = 256;
  h.scale = 0.35f;
  std::vector<uint8_t> buf(static_cast<size_t>(AttentionRequestBytes(0, 0, 0, 32, 16)));
  std::memcpy(buf.data(), &h, sizeof(h));
  auto v = ParseAttentionRequest(buf);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->header.capacity_tokens, 256);
  h.capacity_tokens = 0;
  std::memcpy(buf.data(), &h, sizeof(h));
  EXPECT_EQ(ParseAttentionRequest(buf).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AttentionWire, RepliesRoundTripAndErrorsFit) {
  std::vector<uint8_t> slot(static_cast<size_t>(AttentionReplyBytes(3, 8)));
  AttentionReplyHeader h;
  h.batch_id = 5;
  h.total_tokens = 3;
  h.q_dim = 8;
  std::memcpy(slot.data(), &h, sizeof(h));
  float* out = reinterpret_cast<float*>(slot.data() + AttentionReplyRowsOffset(0));
  out[23] = 4.5f;
  auto v = ParseAttentionReply(slot);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->out[23], 4.5f);
  // Truncated rows.
  std::vector<uint8_t> cut(slot.begin(), slot.end() - 4);
  EXPECT_FALSE(ParseAttentionReply(cut).ok());

  // An error reply with a long message into a small slot is cut, not overrun.
  std::vector<uint8_t> small(sizeof(AttentionReplyHeader) + 10);
  const int64_t n = WriteAttentionErrorReply(
      9, absl::ResourceExhaustedError(std::string(100, 'x')), absl::MakeSpan(small));
  EXPECT_EQ(n, static_cast<int64_t>(small.size()));
  auto e = ParseAttentionReply(absl::MakeConstSpan(small.data(), static_cast<size_t>(n)));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->header.status_code, static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(e->header.batch_id, 9u);
  EXPECT_EQ(e->error, std::string(10, 'x'));
  EXPECT_EQ(e->out, nullptr);
}

}  // namespace
}  // namespace tandem::wire
