#include "common/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "common/shm/shm_sync.h"
#include "common/shm/testing/shm_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::shm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class ShmSegmentTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_THAT(ListSegments(prefix_), IsEmpty()) << prefix_; }
  std::string Name(std::string_view suffix) const { return prefix_ + std::string(suffix); }

  const std::string prefix_ = testing::UniquePrefix("seg");
};

// Creates a non-Tandem file in /dev/shm of `size` bytes filled with `fill`.
void MakeForeign(const std::string& name, int64_t size, uint8_t fill) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, size), 0);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    std::memset(p, fill, size);
    ::munmap(p, size);
  }
  ::close(fd);
}

TEST_F(ShmSegmentTest, CreateOpenShareBytes) {
  auto created = ShmSegment::Create(Name("a"), 10000);
  ASSERT_TRUE(created.ok()) << created.status();
  ShmSegment& owner = **created;
  EXPECT_TRUE(owner.is_owner());
  EXPECT_EQ(owner.payload_size(), 10000);
  EXPECT_EQ(owner.size(), kSegmentHeaderBytes + 10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(owner.payload()) % 4096, 0u);
  EXPECT_EQ(owner.kind(), SegmentKind::kRaw);
  EXPECT_EQ(owner.creator_pid(), ::getpid());
  std::memcpy(owner.payload(), "hello", 5);

  auto opened = ShmSegment::Open(Name("a"));
  ASSERT_TRUE(opened.ok()) << opened.status();
  ShmSegment& peer = **opened;
  EXPECT_FALSE(peer.is_owner());
  EXPECT_TRUE(peer.writable());
  EXPECT_EQ(peer.size(), owner.size());
  EXPECT_EQ(std::memcmp(peer.payload(), "hello", 5), 0);
  peer.payload()[9999] = 42;
  EXPECT_EQ(owner.payload()[9999], 42);
  EXPECT_THAT(ListSegments(prefix_), ElementsAre(Name("a")));

  auto ro = ShmSegment::Open(Name("a"), ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_FALSE((*ro)->writable());
  EXPECT_EQ((*ro)->payload()[9999], 42);
}

TEST_F(ShmSegmentTest, DestructorUnlinks) {
  {
    auto seg = ShmSegment::Create(Name("d"), 100);
    ASSERT_TRUE(seg.ok()) << seg.status();
    EXPECT_THAT(ListSegments(prefix_), ElementsAre(Name("d")));
  }
  EXPECT_THAT(ListSegments(prefix_), IsEmpty());
  EXPECT_EQ(ShmSegment::Open(Name("d")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ShmSegmentTest, EarlyUnlinkKeepsMappings) {
  auto owner = ShmSegment::Create(Name("u"), 4096);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto peer = ShmSegment::Open(Name("u"));
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ((*peer)->Unlink().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*owner)->Unlink().ok());
  EXPECT_TRUE((*owner)->Unlink().ok());  // idempotent
  EXPECT_THAT(ListSegments(prefix_), IsEmpty());
  (*owner)->payload()[7] = 9;
  EXPECT_EQ((*peer)->payload()[7], 9);
  // The name can be reused; the old owner's destructor must not unlink it.
  auto again = ShmSegment::Create(Name("u"), 64);
  ASSERT_TRUE(again.ok()) << again.status();
  owner->reset();
  EXPECT_THAT(ListSegments(prefix_), ElementsAre(Name("u")));
}

TEST_F(ShmSegmentTest, NamesAreValidated) {
  for (const char* bad : {"tandem-x", "/other-x", "/tandem-", "/tandem-a/b", "/tandem-a b",
                          "/tandem-\xc3\xa9", "/tandem-x\n"}) {
    EXPECT_EQ(ValidateSegmentName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(ShmSegment::Create(bad, 10).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ShmSegment::Open(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(ValidateSegmentName("/tandem-" + std::string(201, 'a')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateSegmentName("/tandem-" + std::string(200, 'a')).ok());
  EXPECT_TRUE(ValidateSegmentName("/tandem-weights-123-0.v2_x").ok());
  const std::string a = MakeSegmentName("ring"), b = MakeSegmentName("ring");
  EXPECT_NE(a, b);
  EXPECT_TRUE(ValidateSegmentName(a).ok()) << a;
  EXPECT_THAT(a, HasSubstr(absl::StrCat("-", ::getpid(), "-")));
}

TEST_F(ShmSegmentTest, SizesAreChecked) {
  EXPECT_EQ(ShmSegment::Create(Name("s"), 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create(Name("s"), -5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create(Name("s"), int64_t{1} << 50).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto seg = ShmSegment::Create(Name("s"), 1);
  ASSERT_TRUE(seg.ok());
  EXPECT_TRUE((*seg)->ContainsPayloadRange(kSegmentHeaderBytes, 1));
  EXPECT_FALSE((*seg)->ContainsPayloadRange(kSegmentHeaderBytes, 2));
  EXPECT_FALSE((*seg)->ContainsPayloadRange(0, 1));
  EXPECT_FALSE((*seg)->ContainsPayloadRange(kSegmentHeaderBytes + 2, 0));
  EXPECT_FALSE((*seg)->ContainsPayloadRange(kSegmentHeaderBytes, ~uint64_t{0}));
}

// A reservation past /dev/shm's free space fails up front, whether it is
// made by fallocate (most kinds) or through the huge-page-advised mapping
// (weight stores), and leaves nothing behind.
TEST_F(ShmSegmentTest, ReservingMoreThanTheMountHoldsIsResourceExhausted) {
  struct statvfs fs;
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  if (fs.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit (tmpfs size=0)";
  const int64_t too_big =
      static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize) + (int64_t{64} << 20);
  for (SegmentKind kind : {SegmentKind::kRaw, SegmentKind::kWeightStore}) {
    SegmentOptions options;
    options.kind = kind;
    const auto seg = ShmSegment::Create(Name("big"), too_big, options);
    EXPECT_EQ(seg.status().code(), absl::StatusCode::kResourceExhausted)
        << static_cast<int>(kind) << ": " << seg.status();
    EXPECT_THAT(seg.status().message(), HasSubstr("cannot reserve"));
    EXPECT_EQ(ShmSegment::Open(Name("big")).status().code(), absl::StatusCode::kNotFound);
  }
  // A weight store that fits is reserved and reads back zeros.
  SegmentOptions options;
  options.kind = SegmentKind::kWeightStore;
  auto seg = ShmSegment::Create(Name("fits"), int64_t{4} << 20, options);
  ASSERT_TRUE(seg.ok()) << seg.status();
  int64_t nonzero = 0;
  for (int64_t i = 0; i < (*seg)->payload_size(); i += 4096) nonzero += (*seg)->payload()[i] != 0;
  EXPECT_EQ(nonzero, 0);
}

TEST_F(ShmSegmentTest, CreateIsExclusiveAndOpenNeedsAName) {
  auto seg = ShmSegment::Create(Name("x"), 10);
  ASSERT_TRUE(seg.ok());
  EXPECT_EQ(ShmSegment::Create(Name("x"), 10).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ShmSegment::Open(Name("missing")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ShmSegmentTest, NotReadyUntilMarked) {
  SegmentOptions options;
  options.mark_ready = false;
  options.kind = SegmentKind::kSlotRing;
  auto seg = ShmSegment::Create(Name("r"), 10, options);
  ASSERT_TRUE(seg.ok());
  EXPECT_EQ(ShmSegment::Open(Name("r")).status().code(), absl::StatusCode::kUnavailable);
  (*seg)->MarkReady();
  EXPECT_TRUE(ShmSegment::Open(Name("r")).ok());
  EXPECT_TRUE(
      ShmSegment::Open(Name("r"), ShmSegment::Access::kReadWrite, SegmentKind::kSlotRing).ok());
  const auto wrong =
      ShmSegment::Open(Name("r"), ShmSegment::Access::kReadWrite, SegmentKind::kWeightStore);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong.status().message(), HasSubstr("slot ring"));
}

TEST_F(ShmSegmentTest, ForeignAndMismatchedSegmentsAreRejected) {
  MakeForeign(Name("empty"), 0, 0);
  EXPECT_EQ(ShmSegment::Open(Name("empty")).status().code(), absl::StatusCode::kUnavailable);
  MakeForeign(Name("small"), 100, 0xab);
  EXPECT_EQ(ShmSegment::Open(Name("small")).status().code(), absl::StatusCode::kFailedPrecondition);
  MakeForeign(Name("junk"), 3 * 4096, 0xab);
  EXPECT_EQ(ShmSegment::Open(Name("junk")).status().code(), absl::StatusCode::kFailedPrecondition);
  MakeForeign(Name("zeros"), 3 * 4096, 0);
  EXPECT_EQ(ShmSegment::Open(Name("zeros")).status().code(), absl::StatusCode::kUnavailable);
  // Foreign files are never removed as stale, nor fresh headerless ones.
  EXPECT_EQ(*RemoveStaleSegments(prefix_), 0);
  // Headerless files older than a minute were left by a creator that died
  // while creating: those go.
  for (const char* n : {"empty", "small", "junk", "zeros"}) {
    const int fd = ::shm_open(Name(n).c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    const struct timespec old[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
    ASSERT_EQ(::futimens(fd, old), 0);
    ::close(fd);
  }
  EXPECT_EQ(*RemoveStaleSegments(prefix_), 2);
  EXPECT_THAT(ListSegments(prefix_), ElementsAre(Name("junk"), Name("small")));
  for (const char* n : {"small", "junk"}) ::shm_unlink(Name(n).c_str());

  auto seg = ShmSegment::Create(Name("v"), 4096);
  ASSERT_TRUE(seg.ok());
  auto* h = reinterpret_cast<SegmentHeader*>((*seg)->base());
  h->version = kSegmentLayoutVersion + 1;
  auto opened = ShmSegment::Open(Name("v"));
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr("version"));
  h->version = kSegmentLayoutVersion;
  h->total_bytes += 4096;
  EXPECT_EQ(ShmSegment::Open(Name("v")).status().code(), absl::StatusCode::kFailedPrecondition);
  h->total_bytes -= 4096;
  EXPECT_TRUE(ShmSegment::Open(Name("v")).ok());
}

TEST_F(ShmSegmentTest, RemoveStaleSegmentsOfDeadCreators) {
  auto live = ShmSegment::Create(Name("live"), 100);
  ASSERT_TRUE(live.ok());
  // A child creates two segments and dies without cleaning up (as a SIGKILLed
  // worker would); a third it cleans up itself.
  const std::string prefix = prefix_;
  auto child = testing::ForkedChild::Start([prefix] {
    for (const char* n : {"dead1", "dead2"}) {
      auto seg = ShmSegment::Create(prefix + n, 100);
      if (!seg.ok()) return 1;
      (void)seg->release();  // leak: no unlink
    }
    auto tidy = ShmSegment::Create(prefix + "tidy", 100);
    return tidy.ok() ? 0 : 2;
  });
  ASSERT_EQ(child.Wait(absl::Seconds(10)), 0);
  EXPECT_THAT(ListSegments(prefix_), ElementsAre(Name("dead1"), Name("dead2"), Name("live")));

  EXPECT_EQ(RemoveStaleSegments("/other-").status().code(), absl::StatusCode::kInvalidArgument);
  auto removed = RemoveStaleSegments(prefix_);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 2);
  EXPECT_THAT(ListSegments(prefix_), ElementsAre(Name("live")));
}

TEST(ProcessIdentityTest, SelfIsAliveAndDeadChildIsNot) {
  const ProcessIdentity self = ProcessIdentity::Self();
  EXPECT_EQ(self.pid, ::getpid());
  EXPECT_GT(self.start_time, 0u);
  EXPECT_TRUE(IsProcessAlive(self));
  EXPECT_GT(self.pid_ns, 0u);
  EXPECT_FALSE(IsProcessAlive({self.pid, self.start_time + 1, self.pid_ns}));  // pid reused
  EXPECT_FALSE(IsProcessAlive({}));
  // Another pid namespace (or an unknown one): cannot tell, so alive.
  EXPECT_TRUE(IsProcessAlive({self.pid, self.start_time + 1, self.pid_ns + 1}));
  EXPECT_TRUE(IsProcessAlive({self.pid, self.start_time + 1, 0}));

  auto child = testing::ForkedChild::Start([] {
    ::pause();
    return 0;
  });
  const ProcessIdentity c = ProcessIdentity::Of(child.pid());
  EXPECT_TRUE(IsProcessAlive(c));
  child.Kill();
  // A zombie (killed, not yet reaped) counts as dead.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (IsProcessAlive(c) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(IsProcessAlive(c));
  EXPECT_EQ(child.Wait(absl::Seconds(5)), -SIGKILL);
  EXPECT_FALSE(IsProcessAlive(c));
}

}  // namespace
}  // namespace tandem::shm
