#include "common/mapped_file.h"

#include <linux/magic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

// A scratch file of `bytes` random bytes, removed with the fixture.
class MappedFileTest : public ::testing::Test {
 protected:
  void Write(int64_t bytes) {
    char tmpl[] = "/tmp/tandem_mapped_file_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
    const uint32_t seed = std::random_device{}();
    std::mt19937 rng(seed);
    bytes_.resize(static_cast<size_t>(bytes));
    for (auto& b : bytes_) b = static_cast<uint8_t>(rng());
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes_.data()), bytes);
    trace_.emplace(__FILE__, __LINE__, "seed " + std::to_string(seed));  // until the test ends
  }
  void TearDown() override {
    if (!path_.empty()) std::remove(path_.c_str());
  }

  std::string path_;
  std::vector<uint8_t> bytes_;
  std::optional<::testing::ScopedTrace> trace_;
};

TEST_F(MappedFileTest, MapsTheWholeFile) {
  Write(3 * 4096 + 17);
  auto f = MappedFile::Open(path_);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->size(), static_cast<int64_t>(bytes_.size()));
  EXPECT_EQ(std::vector<uint8_t>((*f)->data(), (*f)->data() + (*f)->size()), bytes_);
}

TEST_F(MappedFileTest, MissingFileIsNotFound) {
  EXPECT_EQ(MappedFile::Open("/nonexistent/tandem/file").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(DropFromPageCache("/nonexistent/tandem/file").code(), absl::StatusCode::kNotFound);
}

// After the drop the file reads the same, now from disk, and none of its
// pages are resident until touched (on a file system with a page cache of
// its own: tmpfs keeps its pages, which are the file).
TEST_F(MappedFileTest, DroppedFileReadsTheSameFromDisk) {
  Write(int64_t{8} << 20);
  ASSERT_TRUE(DropFromPageCache(path_).ok());
  auto f = MappedFile::Open(path_);
  ASSERT_TRUE(f.ok()) << f.status();
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> resident(static_cast<size_t>(((*f)->size() + page - 1) / page));
  ASSERT_EQ(::mincore(const_cast<uint8_t*>((*f)->data()), static_cast<size_t>((*f)->size()),
                      resident.data()),
            0);
  int64_t in_cache = 0;
  for (unsigned char r : resident) in_cache += r & 1;
  struct statfs fs;
  ASSERT_EQ(::statfs(path_.c_str(), &fs), 0);
  if (fs.f_type != TMPFS_MAGIC) {
    EXPECT_LT(in_cache, static_cast<int64_t>(resident.size()) / 4)
        << "pages still cached after the drop";
  }
  EXPECT_EQ(std::vector<uint8_t>((*f)->data(), (*f)->data() + (*f)->size()), bytes_);
}

// The count parses on every Linux with smaps_rollup; whether the kernel took
// the huge-page advice depends on its settings and the file system, so only
// a count of whole 2 MiB pages is required.
TEST_F(MappedFileTest, HugePageCountParsesInWholePages) {
  Write(int64_t{8} << 20);
  ASSERT_TRUE(DropFromPageCache(path_).ok());
  auto f = MappedFile::Open(path_);
  ASSERT_TRUE(f.ok()) << f.status();
  uint64_t sum = 0;
  for (int64_t i = 0; i < (*f)->size(); i += 4096) sum += (*f)->data()[i];
  absl::StatusOr<int64_t> huge = FileHugePageBytes();
  ASSERT_TRUE(huge.ok()) << huge.status();
  std::printf("file pages mapped 2 MiB at a time: %lld bytes (checksum %llu)\n",
              static_cast<long long>(*huge), static_cast<unsigned long long>(sum));
  EXPECT_GE(*huge, 0);
  EXPECT_EQ(*huge % (int64_t{2} << 20), 0);
}

TEST(SmapsRollupBytes, ReadsAFieldAndRefusesAnUnknownOne) {
  absl::StatusOr<int64_t> rss = SmapsRollupBytes("Rss");
  ASSERT_TRUE(rss.ok()) << rss.status();
  EXPECT_GT(*rss, 0);
  EXPECT_EQ(*rss % 1024, 0);
  // "Rss" must not match a longer field that starts with it, nor a made-up one.
  absl::StatusOr<int64_t> none = SmapsRollupBytes("NoSuchField");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable) << none.status();
  EXPECT_EQ(SmapsRollupBytes("Rs").status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tandem
