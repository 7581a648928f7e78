#include "gpu_worker/engine/pinned_ranges.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(PageAlignedRanges, WidensToPagesAndMergesOverlapsAndNeighbours) {
  constexpr size_t kPage = 4096;
  const std::vector<HostRange> got = PageAlignedRanges(
      {
          {3 * kPage + 100, 50},       // inside page 3
          {3 * kPage + 4000, 200},     // pages 3-4: overlaps the first
          {6 * kPage, kPage},          // page 6 exactly
          {5 * kPage + 10, 1},         // page 5: touches 4 and 6
          {20 * kPage + 1, 2 * kPage}, // pages 20-22
          {9 * kPage, 0},              // empty: dropped
      },
      kPage);
  const std::vector<HostRange> want = {{3 * kPage, 4 * kPage}, {20 * kPage, 3 * kPage}};
  EXPECT_EQ(got, want);
}

// On random spans: the ranges are page-aligned, disjoint, not touching,
// sorted, cover every byte of every span and no page that holds none.
TEST(PageAlignedRanges, CoversExactlyThePagesOfRandomSpans) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  constexpr size_t kPage = 64;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<HostRange> spans;
    std::set<uintptr_t> pages;  // pages holding a byte of some span
    const int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i) {
      const uintptr_t b = std::uniform_int_distribution<uintptr_t>(0, 5000)(rng);
      const size_t len = std::uniform_int_distribution<size_t>(0, 300)(rng);
      spans.push_back({b, len});
      for (uintptr_t p = b / kPage; len > 0 && p <= (b + len - 1) / kPage; ++p) pages.insert(p);
    }
    const std::vector<HostRange> got = PageAlignedRanges(spans, kPage);
    std::set<uintptr_t> covered;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].begin % kPage, 0u);
      ASSERT_EQ(got[i].bytes % kPage, 0u);
      ASSERT_GT(got[i].bytes, 0u);
      if (i > 0) ASSERT_GT(got[i].begin, got[i - 1].begin + got[i - 1].bytes);
      for (uintptr_t p = got[i].begin / kPage; p < (got[i].begin + got[i].bytes) / kPage; ++p) {
        covered.insert(p);
      }
    }
    ASSERT_EQ(covered, pages);
  }
}

}  // namespace
}  // namespace tandem
