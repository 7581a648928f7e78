// The L3 size read from a sysfs cache directory: the level-3 entry's size
// in the kernel's formats, other levels and malformed entries ignored.
#include "cpu_worker/perf/machine_info.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tandem::perf {
namespace {

namespace fs = std::filesystem;

class L3FromSysfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem-cache-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Entry(const std::string& index, const std::string& level, const std::string& size) {
    fs::create_directories(dir_ / index);
    std::ofstream(dir_ / index / "level") << level << "\n";
    std::ofstream(dir_ / index / "size") << size << "\n";
  }

  fs::path dir_;
};

TEST_F(L3FromSysfsTest, TheLevelThreeEntryInTheKernelsUnits) {
  Entry("index0", "1", "32K");
  Entry("index2", "2", "1024K");
  Entry("index3", "3", "32768K");
  EXPECT_EQ(L3BytesFromSysfs(dir_.string()), int64_t{32} << 20);
}

TEST_F(L3FromSysfsTest, MegabytesAndPlainBytesAndTheLargestOfSeveral) {
  Entry("index3", "3", "2M");
  Entry("index4", "3", "3145728");
  EXPECT_EQ(L3BytesFromSysfs(dir_.string()), int64_t{3} << 20);
}

TEST_F(L3FromSysfsTest, NothingUsableIsZero) {
  EXPECT_EQ(L3BytesFromSysfs((dir_ / "missing").string()), 0);
  Entry("index2", "2", "1024K");
  Entry("index3", "3", "lots");
  Entry("other", "3", "8M");  // not an index entry
  EXPECT_EQ(L3BytesFromSysfs(dir_.string()), 0);
}

}  // namespace
}  // namespace tandem::perf
