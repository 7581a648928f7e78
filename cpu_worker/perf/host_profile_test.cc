// MeasureHostProfile at small sizes (well under a second each) and the
// per-machine cache of LoadOrMeasureHostProfile.
#include "cpu_worker/perf/host_profile.h"

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "cpu_worker/perf/machine_info.h"
#include "cpu_worker/perf/machine_probe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::perf {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string TempDir(const std::string& leaf) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(base != nullptr ? base : fs::temp_directory_path().string()) /
                 absl::StrCat("host_profile_test_", getpid(), "_", leaf);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Quick options without the attention probe, for the cache tests that only
// need some valid measured profile.
HostProfileOptions Quickest() {
  HostProfileOptions o = QuickHostProfileOptions();
  o.attention_sequences = 0;
  return o;
}

TEST(HostProfileTest, MeasuresEveryCpuFigure) {
  absl::StatusOr<HardwareProfile> p = MeasureHostProfile(QuickHostProfileOptions());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->Validate().ok());
  const MachineInfo m = DescribeMachine();
  // The host device: no GPU, the kernels' thread count, this CPU.
  EXPECT_FALSE(p->has_gpu());
  EXPECT_EQ(p->gpu.count, 0);
  EXPECT_EQ(p->cpu.threads, omp_get_max_threads());
  EXPECT_EQ(p->cpu.name, m.cpu_model.empty() ? "unknown CPU" : m.cpu_model);
  EXPECT_THAT(p->name, StartsWith("host-"));
  EXPECT_THAT(p->source, HasSubstr("measured on"));
  EXPECT_EQ(p->cpu.memory_bytes, HostMemoryBytes());
  EXPECT_GT(p->cpu.memory_bytes, 0);
  // Every figure measured, and positive.
  EXPECT_GT(p->cpu.f32_flops, 0);
  EXPECT_GT(p->cpu.bf16_flops, 0);
  if (Int8KernelMaxRows() > 0) {
    EXPECT_GT(p->cpu.int8_ops, 0);
  }
  EXPECT_GT(p->cpu.memory_bandwidth, 0);
  EXPECT_GT(p->cpu.memory_bandwidth_per_thread, 0);
  EXPECT_LE(p->cpu.memory_bandwidth_per_thread, p->cpu.memory_bandwidth);
  EXPECT_GT(p->cpu.attention_bandwidth, 0);
  EXPECT_GT(p->cpu.op_overhead_s, 0);
  EXPECT_LT(p->cpu.op_overhead_s, 0.01);  // a 16x16 Linear call, not 10 ms
  // The link is the one-thread memcpy, the same both ways, no latency.
  EXPECT_GT(p->link.h2d_bandwidth, 0);
  EXPECT_DOUBLE_EQ(p->link.h2d_bandwidth, p->link.d2h_bandwidth);
  EXPECT_EQ(p->link.h2d_latency_s, 0);
  // One thread of it is a valid profile whose bandwidth is the one-thread
  // figure: the per-thread measurement is what WithCpuThreads draws on.
  absl::StatusOr<HardwareProfile> one = p->WithCpuThreads(1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_DOUBLE_EQ(one->cpu.memory_bandwidth, p->cpu.memory_bandwidth_per_thread);
  std::printf(
      "host profile (quick sizes): %s, %d threads, %.1f GB RAM; f32 %.1f GFLOP/s, bf16 %.1f "
      "GFLOP/s, int8 %.1f GOP/s; read %.1f GB/s (one thread %.1f); attention %.1f GB/s; "
      "memcpy %.1f GB/s; call %.2f us\n",
      p->cpu.name.c_str(), p->cpu.threads, p->cpu.memory_bytes / 1e9, p->cpu.f32_flops / 1e9,
      p->cpu.bf16_flops / 1e9, p->cpu.int8_ops / 1e9, p->cpu.memory_bandwidth / 1e9,
      p->cpu.memory_bandwidth_per_thread / 1e9, p->cpu.attention_bandwidth / 1e9,
      p->link.h2d_bandwidth / 1e9, p->cpu.op_overhead_s * 1e6);
}

TEST(HostProfileTest, NameOptionAndSkippedAttention) {
  HostProfileOptions o = Quickest();
  o.name = "my-box";
  absl::StatusOr<HardwareProfile> p = MeasureHostProfile(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "my-box");
  // Skipped: unknown, which the profile reads as the read bandwidth.
  EXPECT_EQ(p->cpu.attention_bandwidth, 0);
  EXPECT_DOUBLE_EQ(p->CpuAttentionBandwidth(), p->cpu.memory_bandwidth);
}

TEST(HostProfileTest, BadOptionsAreInvalidArgument) {
  auto expect_bad = [](void (*spoil)(HostProfileOptions&)) {
    HostProfileOptions o = Quickest();
    spoil(o);
    EXPECT_EQ(MeasureHostProfile(o).status().code(), absl::StatusCode::kInvalidArgument);
  };
  expect_bad([](HostProfileOptions& o) { o.bandwidth_bytes = 100; });
  expect_bad([](HostProfileOptions& o) { o.copy_bytes = 0; });
  expect_bad([](HostProfileOptions& o) { o.gemm_m = 0; });
  expect_bad([](HostProfileOptions& o) { o.int8_k = 100; });  // not a multiple of 32
  expect_bad([](HostProfileOptions& o) { o.repeats = 0; });
  expect_bad([](HostProfileOptions& o) { o.warmup = -1; });
  expect_bad([](HostProfileOptions& o) {
    o.attention_sequences = 2;
    o.attention_context = 0;
  });
  expect_bad([](HostProfileOptions& o) { o.attention_sequences = -1; });
}

TEST(HostProfileTest, MemoryIsMemTotalOrTheCgroupLimit) {
  const int64_t bytes = HostMemoryBytes();
  EXPECT_GT(bytes, 0);
  // MemTotal is at most the physical pages; a cgroup limit only lowers it.
  EXPECT_LE(bytes, static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
}

TEST(HostProfileCacheTest, MeasuresOnceThenReadsTheCache) {
  const std::string dir = TempDir("cache");
  // A directory that does not exist yet: created on save.
  const std::string path = (fs::path(dir) / "profiles" / "box.json").string();
  absl::StatusOr<HardwareProfile> first = LoadOrMeasureHostProfileAt(path, Quickest());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(fs::exists(path));

  // Mark the cached file: a second call that returns the mark read the
  // cache instead of measuring again.
  HardwareProfile marked = *first;
  marked.source = "cached-marker";
  ASSERT_TRUE(SaveHardwareProfile(marked, path).ok());
  absl::StatusOr<HardwareProfile> second = LoadOrMeasureHostProfileAt(path, Quickest());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->source, "cached-marker");
  EXPECT_DOUBLE_EQ(second->cpu.f32_flops, first->cpu.f32_flops);
  fs::remove_all(dir);
}

TEST(HostProfileCacheTest, StaleOrForeignCachesAreMeasuredAgain) {
  const std::string dir = TempDir("stale");
  const std::string path = (fs::path(dir) / "box.json").string();
  absl::StatusOr<HardwareProfile> measured = MeasureHostProfile(Quickest());
  ASSERT_TRUE(measured.ok()) << measured.status();

  auto expect_remeasured = [&](const char* what) {
    absl::StatusOr<HardwareProfile> p = LoadOrMeasureHostProfileAt(path, Quickest());
    ASSERT_TRUE(p.ok()) << what << ": " << p.status();
    EXPECT_NE(p->source, "cached-marker") << what;
    EXPECT_EQ(p->cpu.threads, omp_get_max_threads()) << what;
    // ... and the fresh profile replaced the file.
    absl::StatusOr<HardwareProfile> on_disk = LoadHardwareProfile(path);
    ASSERT_TRUE(on_disk.ok()) << what << ": " << on_disk.status();
    EXPECT_EQ(on_disk->source, p->source) << what;
  };

  // Taken with another thread count (OMP_NUM_THREADS changed since).
  HardwareProfile other_threads = *measured;
  other_threads.source = "cached-marker";
  other_threads.cpu.threads = omp_get_max_threads() + 1;
  ASSERT_TRUE(SaveHardwareProfile(other_threads, path).ok());
  expect_remeasured("other thread count");

  // A GPU profile: its link is PCIe, not the host device's memcpy.
  HardwareProfile gpu = *measured;
  gpu.source = "cached-marker";
  gpu.gpu.count = 1;
  gpu.gpu.memory_bytes = int64_t{16} << 30;
  gpu.gpu.bf16_flops = 65e12;
  gpu.gpu.memory_bandwidth = 320e9;
  ASSERT_TRUE(gpu.Validate().ok());
  ASSERT_TRUE(SaveHardwareProfile(gpu, path).ok());
  expect_remeasured("GPU profile");

  // Not a profile at all.
  std::ofstream(path, std::ios::trunc) << "{ not json";
  expect_remeasured("corrupt file");
  fs::remove_all(dir);
}

TEST(HostProfileCacheTest, AnUnwritableCacheIsNotAnError) {
  const std::string dir = TempDir("unwritable");
  // The cache's "directory" is a regular file: nothing can be created there.
  const std::string blocker = (fs::path(dir) / "blocker").string();
  std::ofstream(blocker) << "x";
  const std::string path = (fs::path(blocker) / "box.json").string();
  absl::StatusOr<HardwareProfile> p = LoadOrMeasureHostProfileAt(path, Quickest());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->Validate().ok());
  EXPECT_FALSE(fs::exists(path));
  fs::remove_all(dir);
}

TEST(HostProfileCacheTest, DefaultPathIsTheMachineCachePath) {
  const std::string dir = TempDir("default");
  ASSERT_EQ(setenv("TANDEM_CACHE_DIR", dir.c_str(), 1), 0);
  const std::string path = MachineProfileCachePath();
  EXPECT_THAT(path, StartsWith(dir));
  absl::StatusOr<HardwareProfile> p = LoadOrMeasureHostProfile(Quickest());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(fs::exists(path)) << path;
  unsetenv("TANDEM_CACHE_DIR");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::perf
