// Single-process SlotRing tests: both endpoints in this process (two mappings
// of the same segment), threads where blocking matters.
#include "common/shm/slot_ring.h"

#include <cstring>
#include <thread>

#include "common/shm/host_weight_store.h"
#include "common/shm/testing/shm_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::shm {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class SlotRingTest : public ::testing::Test {
 protected:
  void TearDown() override {
    producer_.reset();
    consumer_.reset();
    EXPECT_THAT(ListSegments(prefix_), IsEmpty()) << prefix_;
  }

  // A producer that created the ring and a consumer that opened it.
  void MakeRing(int64_t count, int64_t bytes, RingEndpointOptions endpoint = {}) {
    RingOptions options;
    options.slot_count = count;
    options.slot_bytes = bytes;
    auto p = SlotRing::Create(name_, RingRole::kProducer, options, endpoint);
    ASSERT_TRUE(p.ok()) << p.status();
    producer_ = *std::move(p);
    auto c = SlotRing::Open(name_, RingRole::kConsumer, endpoint);
    ASSERT_TRUE(c.ok()) << c.status();
    consumer_ = *std::move(c);
  }

  absl::Status SendString(std::string_view s, absl::Duration timeout = absl::ZeroDuration()) {
    return producer_->Send(
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()), timeout);
  }
  static std::string AsString(const RingMessage& m) {
    return std::string(reinterpret_cast<const char*>(m.data.data()), m.data.size());
  }

  const std::string prefix_ = testing::UniquePrefix("ring");
  const std::string name_ = prefix_ + "r";
  std::unique_ptr<SlotRing> producer_, consumer_;
};

TEST_F(SlotRingTest, SendsAndReceivesInPlace) {
  MakeRing(4, 256);
  EXPECT_EQ(producer_->slot_count(), 4);
  EXPECT_EQ(consumer_->slot_bytes(), 256);
  EXPECT_TRUE(producer_->peer_attached());
  EXPECT_TRUE(consumer_->peer_attached());

  auto span = producer_->Reserve(5, absl::ZeroDuration());
  ASSERT_TRUE(span.ok()) << span.status();
  ASSERT_EQ(span->size(), 5u);
  std::memcpy(span->data(), "hello", 5);
  const uint64_t offset = static_cast<uint64_t>(span->data() - producer_->segment().base());
  EXPECT_EQ(offset % 64, 0u);
  ASSERT_TRUE(producer_->Commit(5).ok());
  EXPECT_EQ(producer_->position(), 1u);

  auto msg = consumer_->Wait(absl::ZeroDuration());
  ASSERT_TRUE(msg.ok()) << msg.status();
  EXPECT_EQ(msg->seq, 0u);
  EXPECT_EQ(AsString(*msg), "hello");
  // The consumer reads the very bytes the producer wrote: same segment offset.
  EXPECT_EQ(msg->offset, offset);
  EXPECT_EQ(msg->data.data(), consumer_->segment().base() + offset);
  ASSERT_TRUE(consumer_->Release().ok());

  ASSERT_TRUE(SendString("").ok());  // empty messages are messages too
  msg = consumer_->Wait(absl::ZeroDuration());
  ASSERT_TRUE(msg.ok());
  EXPECT_EQ(msg->seq, 1u);
  EXPECT_TRUE(msg->data.empty());
}

TEST_F(SlotRingTest, KeepsOrderAcrossWraparound) {
  MakeRing(3, 64);
  uint64_t next_read = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(SendString(absl::StrCat("m", i)).ok()) << i;
    if (i % 3 == 2) {  // drain in bursts of 3, the whole ring
      for (; next_read <= i; ++next_read) {
        auto msg = consumer_->Wait(absl::ZeroDuration());
        ASSERT_TRUE(msg.ok()) << msg.status();
        EXPECT_EQ(msg->seq, next_read);
        EXPECT_EQ(AsString(*msg), absl::StrCat("m", next_read));
        ASSERT_TRUE(consumer_->Release().ok());
      }
    }
  }
}

TEST_F(SlotRingTest, FullRingTimesOutThenRecovers) {
  MakeRing(3, 64);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SendString("x").ok());
  const absl::Time start = absl::Now();
  auto r = producer_->Reserve(8, absl::Milliseconds(30));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_GE(waited, absl::Milliseconds(30));
  EXPECT_LT(waited, absl::Seconds(2));
  EXPECT_EQ(producer_->Reserve(8, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(consumer_->Wait(absl::ZeroDuration()).ok());
  ASSERT_TRUE(consumer_->Release().ok());
  EXPECT_TRUE(SendString("y").ok());
}

TEST_F(SlotRingTest, RejectsOversizedAndMisorderedCalls) {
  MakeRing(2, 100);
  EXPECT_EQ(producer_->Reserve(101, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(producer_->Reserve(-1, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SendString(std::string(101, 'a')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(producer_->Commit(1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(producer_->Reserve(10, absl::ZeroDuration()).ok());
  ASSERT_TRUE(producer_->Reserve(20, absl::ZeroDuration()).ok());  // same slot again
  EXPECT_EQ(producer_->Commit(21).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(producer_->Commit(20).ok());

  EXPECT_EQ(consumer_->Reserve(1, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(producer_->Wait(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(consumer_->Release().code(), absl::StatusCode::kFailedPrecondition);
  // A role is taken once.
  auto second = SlotRing::Open(name_, RingRole::kConsumer);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("already has a consumer"));

  RingOptions bad;
  bad.slot_count = 0;
  EXPECT_EQ(SlotRing::Create(prefix_ + "bad", RingRole::kProducer, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad.slot_count = 2;
  bad.slot_bytes = int64_t{1} << 40;
  EXPECT_EQ(SlotRing::Create(prefix_ + "bad", RingRole::kProducer, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SlotRingTest, ConsumerTimesOut) {
  MakeRing(2, 64);
  EXPECT_EQ(consumer_->Wait(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  const absl::Time start = absl::Now();
  auto msg = consumer_->Wait(absl::Milliseconds(40));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(msg.status().code(), absl::StatusCode::kDeadlineExceeded) << msg.status();
  EXPECT_GE(waited, absl::Milliseconds(40));
  EXPECT_LT(waited, absl::Seconds(2));
}

TEST_F(SlotRingTest, HoldsSeveralMessagesAndReleasesOldestFirst) {
  MakeRing(3, 64);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SendString(absl::StrCat(i)).ok());
  std::vector<RingMessage> held;
  for (int i = 0; i < 3; ++i) {
    auto m = consumer_->Wait(absl::ZeroDuration());
    ASSERT_TRUE(m.ok());
    held.push_back(*m);
  }
  EXPECT_EQ(consumer_->Wait(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);  // every slot held
  for (int i = 0; i < 3; ++i) EXPECT_EQ(AsString(held[i]), absl::StrCat(i));
  ASSERT_TRUE(consumer_->Release().ok());
  ASSERT_TRUE(SendString("3").ok());  // the freed slot is the oldest one
  EXPECT_EQ(producer_->Reserve(1, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(AsString(held[1]), "1");  // untouched while held
  ASSERT_TRUE(consumer_->Release().ok());
  ASSERT_TRUE(consumer_->Release().ok());
  auto m = consumer_->Wait(absl::ZeroDuration());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->seq, 3u);
  EXPECT_EQ(AsString(*m), "3");
}

TEST_F(SlotRingTest, ProducerCloseDrainsThenUnavailable) {
  MakeRing(4, 64);
  ASSERT_TRUE(SendString("a").ok());
  ASSERT_TRUE(SendString("b").ok());
  producer_->Close();
  EXPECT_TRUE(consumer_->closed());
  EXPECT_EQ(SendString("c").code(), absl::StatusCode::kUnavailable);
  for (const char* want : {"a", "b"}) {
    auto m = consumer_->Wait(absl::Seconds(1));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(AsString(*m), want);
    ASSERT_TRUE(consumer_->Release().ok());
  }
  auto end = consumer_->Wait(absl::Seconds(10));
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(end.status().message(), HasSubstr("closed by the producer"));
}

TEST_F(SlotRingTest, ConsumerCloseStopsProducer) {
  MakeRing(4, 64);
  consumer_->Close();
  auto r = producer_->Reserve(1, absl::Seconds(10));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("closed by the consumer"));
  EXPECT_EQ(consumer_->Wait(absl::ZeroDuration()).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SlotRing::Open(name_, RingRole::kConsumer).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(SlotRingTest, CloseWakesSleepingConsumer) {
  RingEndpointOptions endpoint;
  endpoint.spin = absl::ZeroDuration();
  MakeRing(2, 64, endpoint);
  absl::Status got;
  absl::Duration waited;
  std::thread t([&] {
    const absl::Time start = absl::Now();
    got = consumer_->Wait(absl::Seconds(20)).status();
    waited = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(50));
  producer_->Close();
  t.join();
  EXPECT_EQ(got.code(), absl::StatusCode::kUnavailable) << got;
  EXPECT_LT(waited, absl::Seconds(2));
}

TEST_F(SlotRingTest, CloseWakesBlockedProducer) {
  MakeRing(1, 64);
  ASSERT_TRUE(SendString("fill").ok());
  absl::Status got;
  std::thread t([&] { got = producer_->Reserve(1, absl::Seconds(20)).status(); });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  consumer_.reset();  // the destructor closes
  t.join();
  EXPECT_EQ(got.code(), absl::StatusCode::kUnavailable) << got;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(SlotRingTest, WaitForPeerAndUnlinkName) {
  RingOptions options;
  options.slot_count = 2;
  options.slot_bytes = 64;
  auto consumer = SlotRing::Create(name_, RingRole::kConsumer, options);
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  EXPECT_FALSE((*consumer)->peer_attached());
  EXPECT_EQ((*consumer)->WaitForPeer(absl::Milliseconds(10)).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::unique_ptr<SlotRing> producer;
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(30));
    producer = *SlotRing::Open(name_, RingRole::kProducer);
  });
  EXPECT_TRUE((*consumer)->WaitForPeer(absl::Seconds(10)).ok());
  t.join();
  ASSERT_TRUE((*consumer)->UnlinkName().ok());
  EXPECT_THAT(ListSegments(prefix_), IsEmpty());
  ASSERT_TRUE(producer->Send(absl::Span<const uint8_t>(), absl::ZeroDuration()).ok());
  EXPECT_TRUE((*consumer)->Wait(absl::ZeroDuration()).ok());
}

TEST_F(SlotRingTest, OnlyOpensRings) {
  auto store = HostWeightStore::Create(prefix_ + "store", {.capacity_bytes = 4096});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(SlotRing::Open(prefix_ + "store", RingRole::kConsumer).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SlotRing::Open(prefix_ + "none", RingRole::kConsumer).status().code(),
            absl::StatusCode::kNotFound);
}

// Threads stand in for processes here; the fork tests cover the real thing.
void StreamBetweenThreads(SlotRing* producer, SlotRing* consumer, int n) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const int64_t max = producer->slot_bytes();
  std::thread t([&] {
    for (int i = 0; i < n; ++i) {
      const int64_t size = testing::MessageSize(seed, i, max);
      auto span = producer->Reserve(size, absl::Seconds(10));
      if (!span.ok()) return;
      testing::FillMessage(seed, i, *span);
      if (!producer->Commit(size).ok()) return;
    }
  });
  int received = 0;
  for (; received < n; ++received) {
    auto m = consumer->Wait(absl::Seconds(10));
    if (!m.ok()) {
      ADD_FAILURE() << received << ": " << m.status();
      break;
    }
    EXPECT_EQ(m->seq, static_cast<uint64_t>(received));
    const absl::Status check = testing::CheckMessage(seed, received, max, m->data);
    if (!check.ok()) {
      ADD_FAILURE() << check;
      break;
    }
    EXPECT_TRUE(consumer->Release().ok());
  }
  consumer->Close();  // unblocks the producer if we stopped early
  t.join();
  EXPECT_EQ(received, n);
}

TEST_F(SlotRingTest, StreamsBetweenThreadsSpinning) {
  MakeRing(8, 1024);
  StreamBetweenThreads(producer_.get(), consumer_.get(), 20000);
}

TEST_F(SlotRingTest, StreamsBetweenThreadsSleepingOnly) {
  RingEndpointOptions endpoint;
  endpoint.spin = absl::ZeroDuration();
  MakeRing(2, 512, endpoint);
  StreamBetweenThreads(producer_.get(), consumer_.get(), 20000);
}

}  // namespace
}  // namespace tandem::shm
