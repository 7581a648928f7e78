#include "common/shm/huge_pages.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/shm/shm_segment.h"
#include "gtest/gtest.h"

namespace tandem::shm {
namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;

// A scratch file holding `text`, removed when the test ends.
class TextFile {
 public:
  explicit TextFile(const std::string& text) {
    char tmpl[] = "/tmp/tandem_huge_pages_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~TextFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

constexpr char kProc[] = "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n";
constexpr char kShmDefault[] = "shm /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0\n";
constexpr char kShmAdvise[] = "tmpfs /dev/shm tmpfs rw,relatime,size=24684096k,huge=advise 0 0\n";
constexpr char kInherit[] = "always within_size advise [never] deny force\n";

TEST(ShmHugePagePolicy, ReadsTheDevShmMountsHugeOption) {
  const TextFile inherit(kInherit);
  EXPECT_EQ(ShmHugePagePolicy(TextFile(std::string(kProc) + kShmAdvise).path(), inherit.path()),
            "advise");
  // No huge= option: tmpfs's default.
  EXPECT_EQ(ShmHugePagePolicy(TextFile(std::string(kProc) + kShmDefault).path(), inherit.path()),
            "never");
  // Mounts stack: the last line on /dev/shm is the one a path resolves to.
  EXPECT_EQ(
      ShmHugePagePolicy(TextFile(std::string(kShmDefault) + kShmAdvise).path(), inherit.path()),
      "advise");
  EXPECT_EQ(
      ShmHugePagePolicy(TextFile(std::string(kShmAdvise) + kShmDefault).path(), inherit.path()),
      "never");
  // A mount elsewhere with huge= does not count.
  EXPECT_EQ(
      ShmHugePagePolicy(
          TextFile(std::string(kShmDefault) + "tmpfs /dev/shm2 tmpfs rw,huge=always 0 0\n").path(),
          inherit.path()),
      "never");
}

TEST(ShmHugePagePolicy, DenyAndForceOverrideTheMount) {
  const TextFile mounts(std::string(kProc) + kShmAdvise);
  EXPECT_EQ(ShmHugePagePolicy(mounts.path(), TextFile("always advise never [deny] force").path()),
            "deny");
  EXPECT_EQ(ShmHugePagePolicy(TextFile(std::string(kProc) + kShmDefault).path(),
                              TextFile("always advise never deny [force]").path()),
            "force");
  // An unreadable shmem_enabled leaves the mount's word.
  EXPECT_EQ(ShmHugePagePolicy(mounts.path(), "/nonexistent/shmem_enabled"), "advise");
}

TEST(ShmHugePagePolicy, EmptyWithoutAMountOnDevShm) {
  const TextFile inherit(kInherit);
  EXPECT_EQ(ShmHugePagePolicy(TextFile(kProc).path(), inherit.path()), "");
  EXPECT_EQ(ShmHugePagePolicy("/nonexistent/mounts", inherit.path()), "");
}

TEST(WeightStorePageWarning, SilentForSmallStoresAndHugePages) {
  EXPECT_EQ(WeightStorePageWarning("expert weights", 32 << 20, 0, "never"), "");
  EXPECT_EQ(WeightStorePageWarning("expert weights", 4 * kGB, 2 * kGB, "advise"), "");
  EXPECT_EQ(WeightStorePageWarning("expert weights", 4 * kGB, 4 * kGB, "always"), "");
}

TEST(WeightStorePageWarning, NamesThePolicyAndTheFix) {
  const std::string never = WeightStorePageWarning("expert weights", 4 * kGB, 0, "never");
  EXPECT_NE(never.find("expert weights (4.00 GB in /dev/shm) are on 4 KiB pages"),
            std::string::npos)
      << never;
  EXPECT_NE(never.find("mount -o remount,huge=advise /dev/shm"), std::string::npos) << never;
  const std::string deny = WeightStorePageWarning("expert weights", 4 * kGB, 0, "deny");
  EXPECT_NE(deny.find(std::string(kShmemEnabledPath) + " is \"deny\""), std::string::npos) << deny;
  EXPECT_EQ(deny.find("remount"), std::string::npos) << deny;

  // Allowed, yet few huge pages: a remount cannot fix it, so none is advised.
  const std::string advise = WeightStorePageWarning("expert weights", 4 * kGB, 1 * kGB, "advise");
  EXPECT_NE(advise.find("only 1.00 GB on 2 MiB pages although the mount allows them (huge=advise)"),
            std::string::npos)
      << advise;
  EXPECT_EQ(advise.find("remount"), std::string::npos) << advise;
  const std::string unknown = WeightStorePageWarning("expert weights", 4 * kGB, 0, "");
  EXPECT_NE(unknown.find("does not say how /dev/shm is mounted"), std::string::npos) << unknown;
}

// The live figure parses, and a weight store under a policy that forbids
// huge pages adds none to it.
TEST(ShmemHugePageBytes, CountsSharedMemoryOnHugePages) {
  SegmentOptions o;
  o.kind = SegmentKind::kWeightStore;
  const std::string name = MakeSegmentName("huge-pages-test");
  absl::StatusOr<std::unique_ptr<ShmSegment>> seg = ShmSegment::Create(name, 8 << 20, o);
  ASSERT_TRUE(seg.ok()) << seg.status();
  for (int64_t i = 0; i < (*seg)->payload_size(); i += 4096) (*seg)->payload()[i] = 1;
  absl::StatusOr<int64_t> huge = ShmemHugePageBytes();
  ASSERT_TRUE(huge.ok()) << huge.status();
  const std::string policy = ShmHugePagePolicy();
  std::printf("/dev/shm huge pages: \"%s\"; shared memory on 2 MiB pages: %lld bytes\n",
              policy.c_str(), static_cast<long long>(*huge));
  EXPECT_GE(*huge, 0);
  EXPECT_EQ(*huge % (int64_t{2} << 20), 0);
  if (policy == "never" || policy == "deny") EXPECT_EQ(*huge, 0);
  (void)(*seg)->Unlink();
}

}  // namespace
}  // namespace tandem::shm
