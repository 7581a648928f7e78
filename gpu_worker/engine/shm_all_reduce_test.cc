// The shared-memory all-reduce: exact rank-order sums on every rank (threads
// and processes), chunking past the slot capacity, and the ways a group
// fails — a peer that never arrives, dies, or leaves — without hanging.
#include "gpu_worker/engine/shm_all_reduce.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shm/shm_segment.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

uint32_t FreshSeed() { return std::random_device{}(); }

// Rank r's contribution to call c: deterministic in (seed, r, c) so that a
// forked process can recompute what its peers sent.
std::vector<float> Contribution(uint32_t seed, int rank, int call, int64_t n) {
  std::mt19937 rng(seed + 7919u * static_cast<uint32_t>(rank) + 104729u * static_cast<uint32_t>(call));
  std::uniform_real_distribution<float> d(-100.0f, 100.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// The sum the group must produce: rank order, left to right.
std::vector<float> Expected(uint32_t seed, int size, int call, int64_t n) {
  std::vector<float> s = Contribution(seed, 0, call, n);
  for (int r = 1; r < size; ++r) {
    const std::vector<float> v = Contribution(seed, r, call, n);
    for (int64_t i = 0; i < n; ++i) s[i] += v[i];
  }
  return s;
}

// Lengths of successive calls: below, at and above the capacity (several
// chunks), and empty.
const std::vector<int64_t> kLengths = {5, 100, 0, 1000, 333, 1, 257};
constexpr int64_t kCapacity = 100;

ShmAllReduceOptions Options(absl::Duration timeout = absl::Seconds(30)) {
  ShmAllReduceOptions o;
  o.capacity_floats = kCapacity;
  o.timeout = timeout;
  return o;
}

TEST(ShmAllReduceTest, ThreadsGetTheExactRankOrderSum) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  for (int size : {2, 3, 4}) {
    const std::string name = shm::MakeSegmentName("test-ar");
    std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(size));
    std::vector<absl::Status> status(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        auto ar = ShmAllReduce::Create(name, r, size, Options());
        if (!ar.ok()) {
          status[r] = ar.status();
          return;
        }
        for (size_t c = 0; c < kLengths.size(); ++c) {
          std::vector<float> v = Contribution(seed, r, static_cast<int>(c), kLengths[c]);
          if (absl::Status s = (*ar)->Sum(v.data(), kLengths[c]); !s.ok()) {
            status[r] = s;
            return;
          }
          got[r].push_back(std::move(v));
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
      ASSERT_EQ(got[r].size(), kLengths.size());
      for (size_t c = 0; c < kLengths.size(); ++c) {
        EXPECT_EQ(got[r][c], Expected(seed, size, static_cast<int>(c), kLengths[c]))
            << "size " << size << " rank " << r << " call " << c;
      }
    }
    EXPECT_TRUE(shm::ListSegments(name).empty()) << "rank 0 leaves no segment behind";
  }
}

// Ranks as processes. Forked before any OpenMP runs in this binary, and the
// all-reduce itself uses none.
TEST(ShmAllReduceTest, ProcessesGetTheExactRankOrderSum) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  constexpr int kSize = 3;
  const std::string name = shm::MakeSegmentName("test-arp");
  std::vector<pid_t> children;
  for (int r = 1; r < kSize; ++r) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto ar = ShmAllReduce::Create(name, r, kSize, Options());
      if (!ar.ok()) _exit(2);
      for (size_t c = 0; c < kLengths.size(); ++c) {
        std::vector<float> v = Contribution(seed, r, static_cast<int>(c), kLengths[c]);
        if (!(*ar)->Sum(v.data(), kLengths[c]).ok()) _exit(3);
        if (v != Expected(seed, kSize, static_cast<int>(c), kLengths[c])) _exit(4);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  auto ar = ShmAllReduce::Create(name, 0, kSize, Options());
  ASSERT_TRUE(ar.ok()) << ar.status();
  for (size_t c = 0; c < kLengths.size(); ++c) {
    std::vector<float> v = Contribution(seed, 0, static_cast<int>(c), kLengths[c]);
    ASSERT_TRUE((*ar)->Sum(v.data(), kLengths[c]).ok());
    EXPECT_EQ(v, Expected(seed, kSize, static_cast<int>(c), kLengths[c])) << "call " << c;
  }
  for (pid_t pid : children) {
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
  }
}

TEST(ShmAllReduceTest, APeerThatNeverArrivesTimesOutAndFailsTheGroup) {
  const std::string name = shm::MakeSegmentName("test-art");
  auto a = ShmAllReduce::Create(name, 0, 2, Options(absl::Milliseconds(300)));
  auto b = ShmAllReduce::Create(name, 1, 2, Options(absl::Milliseconds(300)));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> v(10, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = (*a)->Sum(v.data(), 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The late rank learns the group is gone instead of waiting.
  const absl::Status late = (*b)->Sum(v.data(), 10);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  EXPECT_EQ((*a)->Sum(v.data(), 10).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ShmAllReduceTest, ADeadPeerProcessIsNoticedLongBeforeTheTimeout) {
  const std::string name = shm::MakeSegmentName("test-ard");
  auto a = ShmAllReduce::Create(name, 0, 2, Options(absl::Seconds(60)));
  ASSERT_TRUE(a.ok()) << a.status();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Joins, then dies without a word (no destructor runs).
    auto b = ShmAllReduce::Create(name, 1, 2, Options(absl::Seconds(60)));
    _exit(b.ok() ? 0 : 2);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::vector<float> v(10, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = (*a)->Sum(v.data(), 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("is gone"), std::string::npos) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ShmAllReduceTest, ARankThatLeavesFailsItsPeersAtOnce) {
  const std::string name = shm::MakeSegmentName("test-arl");
  auto a = ShmAllReduce::Create(name, 0, 2, Options(absl::Seconds(60)));
  ASSERT_TRUE(a.ok());
  {
    auto b = ShmAllReduce::Create(name, 1, 2, Options(absl::Seconds(60)));
    ASSERT_TRUE(b.ok());
  }
  std::vector<float> v(10, 1.0f);
  const absl::Status s = (*a)->Sum(v.data(), 10);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("left the group"), std::string::npos) << s;
}

TEST(ShmAllReduceTest, BadArgumentsAreRejected) {
  const std::string name = shm::MakeSegmentName("test-arb");
  EXPECT_EQ(ShmAllReduce::Create(name, 0, 0, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmAllReduce::Create(name, 2, 2, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmAllReduce::Create(name, -1, 2, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  ShmAllReduceOptions zero = Options();
  zero.capacity_floats = 0;
  EXPECT_EQ(ShmAllReduce::Create(name, 0, 2, zero).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmAllReduce::Create("not-a-tandem-name", 0, 2, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nobody creates the group: a joining rank gives up after its timeout.
  EXPECT_EQ(ShmAllReduce::Create(name, 1, 2, Options(absl::Milliseconds(50))).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  auto a = ShmAllReduce::Create(name, 0, 2, Options());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(ShmAllReduce::Create(name, 0, 2, Options()).status().code(),
            absl::StatusCode::kAlreadyExists);  // the name is taken
  EXPECT_EQ(ShmAllReduce::Create(name, 1, 3, Options()).status().code(),
            absl::StatusCode::kFailedPrecondition);  // another group size
  auto b = ShmAllReduce::Create(name, 1, 2, Options());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(ShmAllReduce::Create(name, 1, 2, Options()).status().code(),
            absl::StatusCode::kAlreadyExists);  // rank 1 is taken
  std::vector<float> v(4, 1.0f);
  EXPECT_EQ((*a)->Sum(v.data(), -1).code(), absl::StatusCode::kInvalidArgument);

  // A group of one needs no peers and no segment.
  auto solo = ShmAllReduce::Create(shm::MakeSegmentName("test-ar1"), 0, 1, Options());
  ASSERT_TRUE(solo.ok());
  EXPECT_TRUE((*solo)->Sum(v.data(), 4).ok());
  EXPECT_EQ(v, std::vector<float>(4, 1.0f));
}

}  // namespace
}  // namespace tandem
