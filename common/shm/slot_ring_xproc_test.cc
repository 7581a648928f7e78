// Cross-process SlotRing tests: the parent creates a ring, a fork()ed child
// opens it by name. Children report failures through their exit status (and
// stderr); the parent never hangs on a child (timeouts, SIGKILL on teardown).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/shm/slot_ring.h"
#include "common/shm/testing/shm_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::shm {
namespace {

using ::testing::AnyOf;
using testing::ForkedChild;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int kMessages = 100000;

class SlotRingXprocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    std::fprintf(stderr, "seed=%llu (replay with TANDEM_SHM_TEST_SEED)\n",
                 static_cast<unsigned long long>(seed_));
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "failed with seed=%llu\n", (unsigned long long)seed_);
    EXPECT_THAT(ListSegments(prefix_), IsEmpty()) << prefix_;
  }

  std::unique_ptr<SlotRing> Create(RingRole role, int64_t count, int64_t bytes,
                                   RingEndpointOptions endpoint = {}) {
    RingOptions options;
    options.slot_count = count;
    options.slot_bytes = bytes;
    auto ring = SlotRing::Create(name_, role, options, endpoint);
    EXPECT_TRUE(ring.ok()) << ring.status();
    return ring.ok() ? *std::move(ring) : nullptr;
  }

  uint64_t seed_ = 0;
  const std::string prefix_ = testing::UniquePrefix("xring");
  const std::string name_ = prefix_ + "r";
};

// Child side: sends messages [0, n) (n < 0: until the ring fails). Exit 0 on
// success.
int ProduceInChild(const std::string& name, uint64_t seed, int n) {
  auto ring = SlotRing::Open(name, RingRole::kProducer);
  if (!ring.ok()) {
    std::fprintf(stderr, "child: %s\n", ring.status().ToString().c_str());
    return 2;
  }
  const int64_t max = (*ring)->slot_bytes();
  for (int64_t i = 0; n < 0 || i < n; ++i) {
    const int64_t size = testing::MessageSize(seed, i, max);
    auto span = (*ring)->Reserve(size, absl::Seconds(10));
    if (!span.ok()) {
      std::fprintf(stderr, "child: %s\n", span.status().ToString().c_str());
      return 3;
    }
    testing::FillMessage(seed, i, *span);
    if (!(*ring)->Commit(size).ok()) return 4;
  }
  return 0;  // the destructor closes the ring
}

// Receives and checks messages [0, n); returns the first error.
absl::Status Consume(SlotRing& ring, uint64_t seed, int n, absl::Duration timeout) {
  const int64_t max = ring.slot_bytes();
  for (int i = 0; i < n; ++i) {
    auto m = ring.Wait(timeout);
    if (!m.ok()) return m.status();
    if (m->seq != static_cast<uint64_t>(i)) {
      return absl::DataLossError(absl::StrCat("ring seq ", m->seq, ", want ", i));
    }
    if (absl::Status s = testing::CheckMessage(seed, i, max, m->data); !s.ok()) return s;
    if (absl::Status s = ring.Release(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

TEST_F(SlotRingXprocTest, ChildProducerStreamsInOrderWithoutLoss) {
  auto ring = Create(RingRole::kConsumer, 16, 4096);
  ASSERT_NE(ring, nullptr);
  auto child = ForkedChild::Start(
      [name = name_, seed = seed_] { return ProduceInChild(name, seed, kMessages); });
  ASSERT_TRUE(Consume(*ring, seed_, kMessages, absl::Seconds(10)).ok());
  // No duplicates or extras: the next call reports the producer's close.
  EXPECT_EQ(ring->Wait(absl::Seconds(10)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_F(SlotRingXprocTest, ChildConsumerReceivesInOrderWithoutLoss) {
  auto ring = Create(RingRole::kProducer, 16, 4096);
  ASSERT_NE(ring, nullptr);
  auto child = ForkedChild::Start([name = name_, seed = seed_] {
    auto r = SlotRing::Open(name, RingRole::kConsumer);
    if (!r.ok()) return 2;
    const absl::Status s = Consume(**r, seed, kMessages, absl::Seconds(10));
    if (!s.ok()) {
      std::fprintf(stderr, "child: %s\n", s.ToString().c_str());
      return 3;
    }
    // The producer closes after the last message: nothing more arrives.
    return (*r)->Wait(absl::Seconds(10)).status().code() == absl::StatusCode::kUnavailable ? 0 : 4;
  });
  const int64_t max = ring->slot_bytes();
  for (int i = 0; i < kMessages; ++i) {
    const int64_t size = testing::MessageSize(seed_, i, max);
    auto span = ring->Reserve(size, absl::Seconds(10));
    ASSERT_TRUE(span.ok()) << i << ": " << span.status();
    testing::FillMessage(seed_, i, *span);
    ASSERT_TRUE(ring->Commit(size).ok());
  }
  ring->Close();
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_F(SlotRingXprocTest, PingPongBothDirections) {
  const std::string back = prefix_ + "back";
  auto ping = Create(RingRole::kProducer, 4, 4096);
  ASSERT_NE(ping, nullptr);
  RingOptions options;
  options.slot_count = 4;
  options.slot_bytes = 4096;
  auto pong = SlotRing::Create(back, RingRole::kConsumer, options);
  ASSERT_TRUE(pong.ok()) << pong.status();
  auto child = ForkedChild::Start([name = name_, back] {
    auto in = SlotRing::Open(name, RingRole::kConsumer);
    auto out = SlotRing::Open(back, RingRole::kProducer);
    if (!in.ok() || !out.ok()) return 2;
    for (;;) {  // echo until the parent closes
      auto m = (*in)->Wait(absl::Seconds(10));
      if (!m.ok()) return m.status().code() == absl::StatusCode::kUnavailable ? 0 : 3;
      if (!(*out)->Send(m->data, absl::Seconds(10)).ok()) return 4;
      if (!(*in)->Release().ok()) return 5;
    }
  });
  for (int i = 0; i < 10000; ++i) {
    const int64_t size = testing::MessageSize(seed_, i, 4096);
    auto span = ping->Reserve(size, absl::Seconds(10));
    ASSERT_TRUE(span.ok()) << span.status();
    testing::FillMessage(seed_, i, *span);
    ASSERT_TRUE(ping->Commit(size).ok());
    auto echo = (*pong)->Wait(absl::Seconds(10));
    ASSERT_TRUE(echo.ok()) << i << ": " << echo.status();
    EXPECT_EQ(echo->seq, static_cast<uint64_t>(i));
    ASSERT_TRUE(testing::CheckMessage(seed_, i, 4096, echo->data).ok());
    ASSERT_TRUE((*pong)->Release().ok());
  }
  ping->Close();
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_F(SlotRingXprocTest, FullRingBlocksProducerUntilConsumerCatchesUp) {
  auto ring = Create(RingRole::kProducer, 2, 4096);
  ASSERT_NE(ring, nullptr);
  constexpr int kCount = 2000;
  auto child = ForkedChild::Start([name = name_, seed = seed_] {
    auto r = SlotRing::Open(name, RingRole::kConsumer);
    if (!r.ok()) return 2;
    absl::SleepFor(absl::Milliseconds(200));  // let the ring fill up
    return Consume(**r, seed, kCount, absl::Seconds(10)).ok() ? 0 : 3;
  });
  ASSERT_TRUE(ring->WaitForPeer(absl::Seconds(10)).ok());
  int i = 0;
  auto send = [&](absl::Duration timeout) -> absl::Status {
    const int64_t size = testing::MessageSize(seed_, i, 4096);
    auto span = ring->Reserve(size, timeout);
    if (!span.ok()) return span.status();
    testing::FillMessage(seed_, i, *span);
    ++i;
    return ring->Commit(size);
  };
  ASSERT_TRUE(send(absl::ZeroDuration()).ok());
  ASSERT_TRUE(send(absl::ZeroDuration()).ok());
  EXPECT_EQ(send(absl::ZeroDuration()).code(), absl::StatusCode::kDeadlineExceeded);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(send(absl::Seconds(10)).ok());  // sleeps until the child frees a slot
  EXPECT_GT(absl::Now() - start, absl::Milliseconds(50));
  while (i < kCount) ASSERT_TRUE(send(absl::Seconds(10)).ok()) << i;
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_F(SlotRingXprocTest, ConsumerTimesOutOnQuietProducerThenSeesClose) {
  auto ring = Create(RingRole::kConsumer, 4, 64);
  ASSERT_NE(ring, nullptr);
  auto child = ForkedChild::Start([name = name_] {
    auto r = SlotRing::Open(name, RingRole::kProducer);
    if (!r.ok()) return 2;
    // Long enough that the parent's 50 ms wait below ends before the send
    // even when the parent loses the CPU for a while on a loaded machine.
    absl::SleepFor(absl::Seconds(2));
    if (!(*r)->Send(absl::Span<const uint8_t>(), absl::Seconds(1)).ok()) return 3;
    (*r)->Close();
    absl::SleepFor(absl::Seconds(30));  // alive but closed
    return 0;
  });
  ASSERT_TRUE(ring->WaitForPeer(absl::Seconds(10)).ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ(ring->Wait(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
  auto m = ring->Wait(absl::Seconds(10));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(ring->Release().ok());
  const absl::Time closed_at = absl::Now();
  auto end = ring->Wait(absl::Seconds(10));
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable) << end.status();
  EXPECT_THAT(end.status().message(), HasSubstr("closed by the producer"));
  EXPECT_LT(absl::Now() - closed_at, absl::Seconds(1));
}

TEST_F(SlotRingXprocTest, KilledProducerIsDetectedNeverHangs) {
  auto ring = Create(RingRole::kConsumer, 8, 4096);
  ASSERT_NE(ring, nullptr);
  auto child =
      ForkedChild::Start([name = name_, seed = seed_] { return ProduceInChild(name, seed, -1); });
  ASSERT_TRUE(Consume(*ring, seed_, 1000, absl::Seconds(10)).ok());
  child.Kill();  // mid-stream; not reaped yet (a zombie)
  const absl::Time killed_at = absl::Now();
  const int64_t max = ring->slot_bytes();
  absl::Status end;
  for (;;) {  // drain whatever was committed, then expect the error
    auto m = ring->Wait(absl::Seconds(3));
    if (!m.ok()) {
      end = m.status();
      break;
    }
    ASSERT_TRUE(testing::CheckMessage(seed_, m->seq, max, m->data).ok());
    ASSERT_TRUE(ring->Release().ok());
  }
  const absl::Duration took = absl::Now() - killed_at;
  EXPECT_EQ(end.code(), absl::StatusCode::kUnavailable) << end;
  EXPECT_THAT(end.message(), HasSubstr("producer process died"));
  EXPECT_LT(took, absl::Seconds(1));
  EXPECT_EQ(child.Wait(absl::Seconds(5)), -SIGKILL);
}

TEST_F(SlotRingXprocTest, KilledConsumerUnblocksProducer) {
  auto ring = Create(RingRole::kProducer, 4, 4096);
  ASSERT_NE(ring, nullptr);
  auto child = ForkedChild::Start([name = name_, seed = seed_] {
    auto r = SlotRing::Open(name, RingRole::kConsumer);
    if (!r.ok() || !Consume(**r, seed, 100, absl::Seconds(10)).ok()) return 2;
    ::pause();  // stop reading, stay alive until killed
    return 0;
  });
  int i = 0;
  absl::Status full;
  while (full.ok()) {  // fill until the stalled child leaves the ring full
    const int64_t size = testing::MessageSize(seed_, i, 4096);
    auto span = ring->Reserve(size, absl::Milliseconds(500));
    if (!span.ok()) {
      full = span.status();
      break;
    }
    testing::FillMessage(seed_, i++, *span);
    ASSERT_TRUE(ring->Commit(size).ok());
  }
  ASSERT_EQ(full.code(), absl::StatusCode::kDeadlineExceeded) << full;
  EXPECT_EQ(i, 104);
  child.Kill();
  const absl::Time killed_at = absl::Now();
  auto r = ring->Reserve(1, absl::Seconds(3));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("consumer process died"));
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(1));
}

TEST_F(SlotRingXprocTest, WithoutPeerChecksTheTimeoutStillFires) {
  RingEndpointOptions endpoint;
  endpoint.peer_check_interval = absl::Hours(1);
  auto ring = Create(RingRole::kConsumer, 4, 64, endpoint);
  ASSERT_NE(ring, nullptr);
  auto child = ForkedChild::Start([name = name_] {
    auto r = SlotRing::Open(name, RingRole::kProducer);
    if (!r.ok()) return 2;
    ::pause();
    return 0;
  });
  ASSERT_TRUE(ring->WaitForPeer(absl::Seconds(10)).ok());
  child.Kill();
  ASSERT_EQ(child.Wait(absl::Seconds(5)), -SIGKILL);
  const absl::Time start = absl::Now();
  EXPECT_EQ(ring->Wait(absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST_F(SlotRingXprocTest, KilledCreatorLeavesSegmentForStaleCleanup) {
  // The child creates the ring and dies; its name stays in /dev/shm until
  // RemoveStaleSegments runs (as `tandem serve` does at start-up).
  auto child = ForkedChild::Start([name = name_, seed = seed_] {
    RingOptions options;
    options.slot_count = 4;
    options.slot_bytes = 4096;
    auto r = SlotRing::Create(name, RingRole::kProducer, options);
    if (!r.ok()) return 2;
    for (int i = 0; i < 3; ++i) {
      const int64_t size = testing::MessageSize(seed, i, 4096);
      auto span = (*r)->Reserve(size, absl::Seconds(10));
      if (!span.ok()) return 3;
      testing::FillMessage(seed, i, *span);
      if (!(*r)->Commit(size).ok()) return 4;
    }
    ::pause();
    return 0;
  });
  std::unique_ptr<SlotRing> ring;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (ring == nullptr && absl::Now() < deadline) {  // NotFound until the child creates it
    auto r = SlotRing::Open(name_, RingRole::kConsumer);
    if (r.ok())
      ring = *std::move(r);
    else
      absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_NE(ring, nullptr);
  ASSERT_TRUE(Consume(*ring, seed_, 3, absl::Seconds(10)).ok());
  EXPECT_EQ(*RemoveStaleSegments(prefix_), 0);  // the creator is alive
  child.Kill();
  EXPECT_THAT(ring->Wait(absl::Seconds(3)).status().code(),
              AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded));
  ASSERT_EQ(child.Wait(absl::Seconds(5)), -SIGKILL);
  EXPECT_THAT(ListSegments(prefix_), ::testing::ElementsAre(name_));
  EXPECT_EQ(*RemoveStaleSegments(prefix_), 1);
}

}  // namespace
}  // namespace tandem::shm
