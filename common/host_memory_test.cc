#include "common/host_memory.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(HostMemory, ParsesMeminfoFields) {
  const char* text =
      "MemTotal:       24576000 kB\n"
      "MemFree:          100000 kB\n"
      "MemAvailable:   20480000 kB\n"
      "MemAvailableX:         7 kB\n";
  EXPECT_EQ(ParseMeminfoBytes(text, "MemTotal"), int64_t{24576000} * 1024);
  EXPECT_EQ(ParseMeminfoBytes(text, "MemAvailable"), int64_t{20480000} * 1024);
  EXPECT_EQ(ParseMeminfoBytes(text, "MemAvail"), 0) << "a prefix of a field is not the field";
  EXPECT_EQ(ParseMeminfoBytes(text, "SwapTotal"), 0);
  EXPECT_EQ(ParseMeminfoBytes("", "MemTotal"), 0);
  EXPECT_EQ(ParseMeminfoBytes("MemTotal: lots kB\n", "MemTotal"), 0);
}

// On this machine: what is available is positive and no more than the
// memory there is (or the cgroup's limit).
TEST(HostMemory, AvailableIsWithinTotal) {
  const int64_t total = MeminfoBytes("MemTotal");
  ASSERT_GT(total, 0) << "no /proc/meminfo";
  const int64_t available = AvailableMemoryBytes();
  EXPECT_GT(available, 0);
  EXPECT_LE(available, total);
  const int64_t limit = CgroupLimitBytes();
  if (limit > 0) EXPECT_LE(available, limit);
}

}  // namespace
}  // namespace tandem
