// Tests of the hardware profile (JSON form, validation, what-if transforms)
// and of the data files that ship with the planner: every example profile in
// coordinator/planner/profiles/ and every model shape in
// coordinator/planner/models/ must load, validate and carry plausible
// figures, so that a typo in a shipped file fails here rather than as a
// strange plan.
#include "common/hardware_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_util.h"
#include "common/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifndef TANDEM_PROFILES_DIR
#error "TANDEM_PROFILES_DIR must name coordinator/planner/profiles"
#endif
#ifndef TANDEM_MODELS_DIR
#error "TANDEM_MODELS_DIR must name coordinator/planner/models"
#endif

namespace tandem {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A profile with every field set to a distinct value, in SI units.
HardwareProfile FullProfile() {
  HardwareProfile p;
  p.name = "test-box";
  p.source = "hand-made for the test";
  p.gpu.name = "Test GPU";
  p.gpu.count = 2;
  p.gpu.memory_bytes = int64_t{17179869184};  // 16 GiB: not a whole number of GB
  p.gpu.bf16_flops = 65e12;
  p.gpu.f32_flops = 8.1e12;
  p.gpu.int8_ops = 130e12;
  p.gpu.memory_bandwidth = 320e9;
  p.gpu.launch_overhead_s = 5e-6;
  p.gpu.interconnect_bandwidth = 32e9;
  p.cpu.name = "Test CPU";
  p.cpu.threads = 24;
  // A /proc/meminfo figure (kB x 1024): the measured profile's case.
  p.cpu.memory_bytes = int64_t{131916644} * 1024;
  p.cpu.bf16_flops = 1.1e12;
  p.cpu.f32_flops = 1.2e12;
  p.cpu.int8_ops = 3e12;
  p.cpu.memory_bandwidth = 100e9;
  p.cpu.memory_bandwidth_per_thread = 10e9;
  p.cpu.attention_bandwidth = 75e9;
  p.cpu.op_overhead_s = 3.4e-6;
  p.link.h2d_bandwidth = 12.5e9;
  p.link.h2d_latency_s = 10e-6;
  p.link.d2h_bandwidth = 13e9;
  p.link.d2h_latency_s = 11e-6;
  return p;
}

void ExpectSameProfile(const HardwareProfile& a, const HardwareProfile& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.gpu.name, b.gpu.name);
  EXPECT_EQ(a.gpu.count, b.gpu.count);
  EXPECT_EQ(a.gpu.memory_bytes, b.gpu.memory_bytes);
  EXPECT_DOUBLE_EQ(a.gpu.bf16_flops, b.gpu.bf16_flops);
  EXPECT_DOUBLE_EQ(a.gpu.f32_flops, b.gpu.f32_flops);
  EXPECT_DOUBLE_EQ(a.gpu.int8_ops, b.gpu.int8_ops);
  EXPECT_DOUBLE_EQ(a.gpu.memory_bandwidth, b.gpu.memory_bandwidth);
  EXPECT_DOUBLE_EQ(a.gpu.launch_overhead_s, b.gpu.launch_overhead_s);
  EXPECT_DOUBLE_EQ(a.gpu.interconnect_bandwidth, b.gpu.interconnect_bandwidth);
  EXPECT_EQ(a.cpu.name, b.cpu.name);
  EXPECT_EQ(a.cpu.threads, b.cpu.threads);
  EXPECT_EQ(a.cpu.memory_bytes, b.cpu.memory_bytes);
  EXPECT_DOUBLE_EQ(a.cpu.bf16_flops, b.cpu.bf16_flops);
  EXPECT_DOUBLE_EQ(a.cpu.f32_flops, b.cpu.f32_flops);
  EXPECT_DOUBLE_EQ(a.cpu.int8_ops, b.cpu.int8_ops);
  EXPECT_DOUBLE_EQ(a.cpu.memory_bandwidth, b.cpu.memory_bandwidth);
  EXPECT_DOUBLE_EQ(a.cpu.memory_bandwidth_per_thread, b.cpu.memory_bandwidth_per_thread);
  EXPECT_DOUBLE_EQ(a.cpu.attention_bandwidth, b.cpu.attention_bandwidth);
  EXPECT_DOUBLE_EQ(a.cpu.op_overhead_s, b.cpu.op_overhead_s);
  EXPECT_DOUBLE_EQ(a.link.h2d_bandwidth, b.link.h2d_bandwidth);
  EXPECT_DOUBLE_EQ(a.link.h2d_latency_s, b.link.h2d_latency_s);
  EXPECT_DOUBLE_EQ(a.link.d2h_bandwidth, b.link.d2h_bandwidth);
  EXPECT_DOUBLE_EQ(a.link.d2h_latency_s, b.link.d2h_latency_s);
}

// A fresh directory under the test's temporary directory.
std::string TempDir(const std::string& leaf) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(base != nullptr ? base : fs::temp_directory_path().string()) /
                 absl::StrCat("hardware_profile_test_", getpid(), "_", leaf);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = (fs::path(dir) / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// --- JSON form ---------------------------------------------------------------

TEST(HardwareProfileJsonTest, RoundTripKeepsEveryField) {
  const HardwareProfile p = FullProfile();
  ASSERT_TRUE(p.Validate().ok());
  const nlohmann::json j = HardwareProfileToJson(p);
  // The JSON form is in the quoted units: GB, GB/s, TFLOP/s, microseconds.
  EXPECT_DOUBLE_EQ(j["gpu"]["bf16_tflops"].get<double>(), 65.0);
  EXPECT_DOUBLE_EQ(j["gpu"]["memory_bandwidth_gbs"].get<double>(), 320.0);
  EXPECT_DOUBLE_EQ(j["link"]["h2d_latency_us"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["cpu"]["op_overhead_us"].get<double>(), 3.4);
  absl::StatusOr<HardwareProfile> q = HardwareProfileFromJson(j);
  ASSERT_TRUE(q.ok()) << q.status();
  ExpectSameProfile(p, *q);
}

TEST(HardwareProfileJsonTest, RoundTripOfAHostProfileKeepsItsLink) {
  // The host device: no GPU, but a "link" (the host-to-"device" copy).
  HardwareProfile p = FullProfile();
  p.gpu = GpuSpec();
  const nlohmann::json j = HardwareProfileToJson(p);
  EXPECT_FALSE(j.contains("gpu"));
  ASSERT_TRUE(j.contains("link"));
  absl::StatusOr<HardwareProfile> q = HardwareProfileFromJson(j);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_FALSE(q->has_gpu());
  ExpectSameProfile(p, *q);
}

TEST(HardwareProfileJsonTest, SaveThenLoadThroughAFile) {
  const std::string dir = TempDir("save");
  const std::string path = (fs::path(dir) / "box.json").string();
  const HardwareProfile p = FullProfile();
  ASSERT_TRUE(SaveHardwareProfile(p, path).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(getpid())));  // renamed away
  absl::StatusOr<HardwareProfile> q = LoadHardwareProfile(path);
  ASSERT_TRUE(q.ok()) << q.status();
  ExpectSameProfile(p, *q);
  fs::remove_all(dir);
}

TEST(HardwareProfileJsonTest, CommentsAreAccepted) {
  const std::string dir = TempDir("comments");
  const std::string path = WriteFile(dir, "commented.json", R"(
// A line comment before the object.
{
  "name": "commented",  // trailing comment
  /* a block
     comment */
  "cpu": {
    "threads": 8,
    "memory_gb": 64,           // 64e9 bytes
    "f32_tflops": 0.5,         // 5e11 FLOP/s
    "memory_bandwidth_gbs": 40 /* 4e10 bytes/s */
  }
}
)");
  absl::StatusOr<HardwareProfile> p = LoadHardwareProfile(path);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "commented");
  EXPECT_EQ(p->cpu.threads, 8);
  EXPECT_EQ(p->cpu.memory_bytes, int64_t{64000000000});
  EXPECT_DOUBLE_EQ(p->cpu.f32_flops, 0.5e12);
  EXPECT_DOUBLE_EQ(p->cpu.memory_bandwidth, 40e9);
  EXPECT_FALSE(p->has_gpu());
  fs::remove_all(dir);
}

// A minimal valid profile with one GPU, as JSON, for the error cases to spoil.
nlohmann::json MinimalJson() {
  return nlohmann::json::parse(R"({
    "name": "minimal",
    "gpu": {"count": 1, "memory_gb": 16, "bf16_tflops": 24, "memory_bandwidth_gbs": 220},
    "link": {"h2d_bandwidth_gbs": 12, "d2h_bandwidth_gbs": 12},
    "cpu": {"threads": 24, "memory_gb": 192, "f32_tflops": 0.65, "memory_bandwidth_gbs": 50}
  })");
}

// The error of parsing MinimalJson() after `spoil`: InvalidArgument whose
// message names `field`.
void ExpectErrorNaming(const std::function<void(nlohmann::json&)>& spoil,
                       const std::string& field) {
  nlohmann::json j = MinimalJson();
  spoil(j);
  absl::StatusOr<HardwareProfile> p = HardwareProfileFromJson(j);
  ASSERT_FALSE(p.ok()) << "accepted " << j.dump();
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(field)) << j.dump();
}

TEST(HardwareProfileJsonTest, MinimalProfileIsValid) {
  absl::StatusOr<HardwareProfile> p = HardwareProfileFromJson(MinimalJson());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->has_gpu());
  EXPECT_EQ(p->gpu.memory_bytes, int64_t{16000000000});
  EXPECT_DOUBLE_EQ(p->link.h2d_bandwidth, 12e9);
}

TEST(HardwareProfileJsonTest, UnknownFieldsAreErrorsNamingTheField) {
  ExpectErrorNaming([](nlohmann::json& j) { j["colour"] = "red"; }, "colour");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["memroy_gb"] = 16; }, "gpu.memroy_gb");
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["cores"] = 12; }, "cpu.cores");
  ExpectErrorNaming([](nlohmann::json& j) { j["link"]["h2d_gbs"] = 12; }, "link.h2d_gbs");
  // A GPU-only key in the cpu section is as unknown as a misspelling.
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["launch_overhead_us"] = 5; },
                    "cpu.launch_overhead_us");
}

TEST(HardwareProfileJsonTest, NegativeFiguresAreErrorsNamingTheField) {
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["f32_tflops"] = -1; }, "cpu.f32_tflops");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["memory_gb"] = -16; }, "gpu.memory_gb");
  ExpectErrorNaming([](nlohmann::json& j) { j["link"]["h2d_latency_us"] = -1; },
                    "link.h2d_latency_us");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["count"] = -1; }, "gpu.count");
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["threads"] = -4; }, "cpu.threads");
}

TEST(HardwareProfileJsonTest, ZeroRequiredFiguresAreErrorsNamingTheField) {
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["threads"] = 0; }, "cpu.threads");
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["memory_gb"] = 0; }, "cpu.memory_gb");
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["f32_tflops"] = 0; }, "cpu.f32_tflops");
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["memory_bandwidth_gbs"] = 0; },
                    "cpu.memory_bandwidth_gbs");
  // Absent counts as zero.
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"].erase("memory_bandwidth_gbs"); },
                    "cpu.memory_bandwidth_gbs");
  // With a GPU present its figures and the link become required.
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["memory_gb"] = 0; }, "gpu.memory_gb");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["bf16_tflops"] = 0; }, "gpu.bf16_tflops");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"].erase("memory_bandwidth_gbs"); },
                    "gpu.memory_bandwidth_gbs");
  ExpectErrorNaming([](nlohmann::json& j) { j.erase("link"); }, "link.h2d_bandwidth_gbs");
  ExpectErrorNaming([](nlohmann::json& j) { j["link"]["d2h_bandwidth_gbs"] = 0; },
                    "link.d2h_bandwidth_gbs");
  // Without a GPU the same zeros are fine: a CPU-only machine.
  nlohmann::json cpu_only = MinimalJson();
  cpu_only["gpu"]["count"] = 0;
  cpu_only["gpu"]["bf16_tflops"] = 0;
  cpu_only.erase("link");
  EXPECT_TRUE(HardwareProfileFromJson(cpu_only).ok());
}

TEST(HardwareProfileJsonTest, BadTypesAreErrorsNamingTheField) {
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["threads"] = "24"; }, "cpu.threads");
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["threads"] = 24.5; }, "cpu.threads");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["count"] = true; }, "gpu.count");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["bf16_tflops"] = "24"; }, "gpu.bf16_tflops");
  ExpectErrorNaming([](nlohmann::json& j) { j["link"]["h2d_bandwidth_gbs"] = nullptr; },
                    "link.h2d_bandwidth_gbs");
  ExpectErrorNaming([](nlohmann::json& j) { j["cpu"]["memory_gb"] = nlohmann::json::array(); },
                    "cpu.memory_gb");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"]["name"] = 3090; }, "gpu.name");
  ExpectErrorNaming([](nlohmann::json& j) { j["name"] = 1; }, "name");
  ExpectErrorNaming([](nlohmann::json& j) { j["gpu"] = nlohmann::json::array(); }, "gpu");
  ExpectErrorNaming([](nlohmann::json& j) { j.erase("cpu"); }, "cpu");
  EXPECT_FALSE(HardwareProfileFromJson(nlohmann::json::array()).ok());
}

TEST(HardwareProfileJsonTest, FileErrorsNameTheFile) {
  const std::string dir = TempDir("errors");
  const std::string missing = (fs::path(dir) / "missing.json").string();
  absl::StatusOr<HardwareProfile> p = LoadHardwareProfile(missing);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("missing.json"));

  const std::string broken = WriteFile(dir, "broken.json", "{\"cpu\": {\"threads\": 4,}");
  p = LoadHardwareProfile(broken);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("broken.json"));

  nlohmann::json j = MinimalJson();
  j["cpu"]["f32_tflops"] = -2;
  const std::string invalid = WriteFile(dir, "invalid.json", j.dump());
  p = LoadHardwareProfile(invalid);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("invalid.json"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("cpu.f32_tflops"));
  fs::remove_all(dir);
}

// --- What-if transforms --------------------------------------------------------

TEST(HardwareProfileTest, WithCpuThreadsScalesComputeLinearlyAndBandwidthByMin) {
  const HardwareProfile p = FullProfile();  // 24 threads, 100 GB/s, 10 GB/s per thread
  // 6 threads: compute x 6/24 = 0.25; bandwidth min(100, 6 x 10) = 60 GB/s;
  // attention bandwidth scales as the bandwidth: 75 x 60/100 = 45 GB/s.
  absl::StatusOr<HardwareProfile> q = p.WithCpuThreads(6);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->cpu.threads, 6);
  EXPECT_DOUBLE_EQ(q->cpu.f32_flops, 0.3e12);
  EXPECT_DOUBLE_EQ(q->cpu.bf16_flops, 0.275e12);
  EXPECT_DOUBLE_EQ(q->cpu.int8_ops, 0.75e12);
  EXPECT_DOUBLE_EQ(q->cpu.memory_bandwidth, 60e9);
  EXPECT_DOUBLE_EQ(q->CpuAttentionBandwidth(), 45e9);
  EXPECT_DOUBLE_EQ(q->CpuBandwidthPerThread(), 10e9);
  // Memory, the GPU and the link do not change.
  EXPECT_EQ(q->cpu.memory_bytes, p.cpu.memory_bytes);
  EXPECT_DOUBLE_EQ(q->gpu.bf16_flops, p.gpu.bf16_flops);
  EXPECT_DOUBLE_EQ(q->link.h2d_bandwidth, p.link.h2d_bandwidth);
  EXPECT_TRUE(q->Validate().ok());

  // 12 threads: 12 x 10 = 120 GB/s exceeds the all-thread 100: capped.
  q = p.WithCpuThreads(12);
  ASSERT_TRUE(q.ok());
  EXPECT_DOUBLE_EQ(q->cpu.f32_flops, 0.6e12);
  EXPECT_DOUBLE_EQ(q->cpu.memory_bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(q->CpuAttentionBandwidth(), 75e9);

  // All threads: the same figures.
  q = p.WithCpuThreads(24);
  ASSERT_TRUE(q.ok());
  EXPECT_DOUBLE_EQ(q->cpu.f32_flops, p.cpu.f32_flops);
  EXPECT_DOUBLE_EQ(q->cpu.memory_bandwidth, p.cpu.memory_bandwidth);

  // Out of [1, threads].
  EXPECT_EQ(p.WithCpuThreads(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.WithCpuThreads(25).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(p.WithCpuThreads(-3).ok());
}

TEST(HardwareProfileTest, UnknownPerThreadBandwidthIsTheAverageThread) {
  HardwareProfile p = FullProfile();
  p.cpu.memory_bandwidth_per_thread = 0;  // unknown: 100 GB/s / 24 threads
  p.cpu.attention_bandwidth = 0;          // unknown: the memory bandwidth
  EXPECT_DOUBLE_EQ(p.CpuBandwidthPerThread(), 100e9 / 24);
  EXPECT_DOUBLE_EQ(p.CpuAttentionBandwidth(), 100e9);
  // 6 threads: 6 x 100/24 = 25 GB/s, and attention follows it.
  absl::StatusOr<HardwareProfile> q = p.WithCpuThreads(6);
  ASSERT_TRUE(q.ok());
  EXPECT_DOUBLE_EQ(q->cpu.memory_bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(q->CpuAttentionBandwidth(), 25e9);
}

TEST(HardwareProfileTest, WithGpuMemoryCapsOnlyTheGpuMemory) {
  const HardwareProfile p = FullProfile();  // 16 GiB per GPU
  const HardwareProfile q = p.WithGpuMemory(int64_t{12} << 30);
  EXPECT_EQ(q.gpu.memory_bytes, int64_t{12} << 30);
  EXPECT_EQ(q.gpu.count, p.gpu.count);
  EXPECT_DOUBLE_EQ(q.gpu.bf16_flops, p.gpu.bf16_flops);
  EXPECT_DOUBLE_EQ(q.gpu.memory_bandwidth, p.gpu.memory_bandwidth);
  EXPECT_EQ(q.cpu.memory_bytes, p.cpu.memory_bytes);
  EXPECT_TRUE(q.Validate().ok());
  // A cap above the GPU's memory leaves it as it is: a budget, not an upgrade.
  EXPECT_EQ(p.WithGpuMemory(int64_t{80} << 30).gpu.memory_bytes, p.gpu.memory_bytes);
}

// --- Shipped example profiles --------------------------------------------------

std::vector<fs::path> FilesIn(const std::string& dir, const std::string& ext) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ShippedProfilesTest, TheTestbedsOfThePapersAreThere) {
  for (const char* name : {"t4-xeon24", "l4-xeon24", "rtx3090-epyc7742", "rtx3090-xeon5318y",
                           "a6000-xeon8358", "a10g", "h100-pcie5"}) {
    EXPECT_TRUE(fs::exists(fs::path(TANDEM_PROFILES_DIR) / absl::StrCat(name, ".json"))) << name;
  }
}

TEST(ShippedProfilesTest, EveryProfileLoadsValidatesAndIsPlausible) {
  const std::vector<fs::path> files = FilesIn(TANDEM_PROFILES_DIR, ".json");
  ASSERT_GE(files.size(), 7u) << TANDEM_PROFILES_DIR;
  std::printf("%-20s %8s %8s %8s %7s %8s %8s %8s %6s\n", "profile", "GPU GB", "GPU TF", "GPU GB/s",
              "PCIe", "CPU thr", "CPU TF", "CPU GB/s", "RAM GB");
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    absl::StatusOr<HardwareProfile> p = LoadHardwareProfile(f.string());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->name, f.stem().string()) << "a profile's name is its file name";
    EXPECT_FALSE(p->source.empty());
    EXPECT_FALSE(p->cpu.name.empty());
    ASSERT_TRUE(p->has_gpu());
    EXPECT_FALSE(p->gpu.name.empty());
    // Ranges that catch a unit slip (bytes for GB, GFLOP/s for TFLOP/s):
    // every shipped machine is between a T4 and an H100.
    EXPECT_GE(p->gpu.memory_bytes, int64_t{8} << 30);
    EXPECT_LE(p->gpu.memory_bytes, int64_t{192} << 30);
    EXPECT_GE(p->gpu.bf16_flops, 10e12);
    EXPECT_LE(p->gpu.bf16_flops, 1000e12);
    EXPECT_GE(p->gpu.memory_bandwidth, 150e9);
    EXPECT_LE(p->gpu.memory_bandwidth, 3500e9);
    EXPECT_GT(p->gpu.launch_overhead_s, 0);
    EXPECT_LT(p->gpu.launch_overhead_s, 100e-6);
    // Attainable PCIe: below a Gen5 x16 link's 63 GB/s raw rate.
    EXPECT_GE(p->link.h2d_bandwidth, 8e9);
    EXPECT_LT(p->link.h2d_bandwidth, 63e9);
    EXPECT_GE(p->link.d2h_bandwidth, 8e9);
    EXPECT_LT(p->link.d2h_bandwidth, 63e9);
    EXPECT_GT(p->link.h2d_latency_s, 0);
    EXPECT_GE(p->cpu.threads, 8);
    EXPECT_GE(p->cpu.memory_bytes, int64_t{32} << 30);
    EXPECT_GE(p->cpu.f32_flops, 0.2e12);
    EXPECT_LE(p->cpu.f32_flops, 20e12);
    EXPECT_GT(p->cpu.bf16_flops, 0);
    EXPECT_GE(p->cpu.memory_bandwidth, 20e9);
    EXPECT_LE(p->cpu.memory_bandwidth, 1000e9);
    EXPECT_GT(p->cpu.op_overhead_s, 0);
    // The orderings the papers' reasoning rests on: HBM/GDDR > DRAM > PCIe,
    // and one thread reads less than all of them.
    EXPECT_GT(p->gpu.memory_bandwidth, p->cpu.memory_bandwidth);
    EXPECT_GT(p->cpu.memory_bandwidth, p->link.h2d_bandwidth);
    EXPECT_GT(p->gpu.bf16_flops, p->cpu.bf16_flops);
    EXPECT_LT(p->CpuBandwidthPerThread(), p->cpu.memory_bandwidth);
    EXPECT_LE(p->CpuAttentionBandwidth(), p->cpu.memory_bandwidth);
    // It survives the transforms the planner applies and a round trip.
    absl::StatusOr<HardwareProfile> one = p->WithCpuThreads(1);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_TRUE(one->Validate().ok());
    EXPECT_TRUE(p->WithGpuMemory(int64_t{12} << 30).Validate().ok());
    absl::StatusOr<HardwareProfile> again = HardwareProfileFromJson(HardwareProfileToJson(*p));
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSameProfile(*p, *again);
    std::printf("%-20s %8.1f %8.0f %8.0f %7.1f %8d %8.2f %8.0f %6.0f\n", p->name.c_str(),
                p->gpu.memory_bytes / 1e9, p->gpu.bf16_flops / 1e12, p->gpu.memory_bandwidth / 1e9,
                p->link.h2d_bandwidth / 1e9, p->cpu.threads, p->cpu.f32_flops / 1e12,
                p->cpu.memory_bandwidth / 1e9, p->cpu.memory_bytes / 1e9);
  }
}

// --- Shipped model shapes ------------------------------------------------------

// Parameters of a model from its config: embeddings, LM head (unless tied),
// per layer attention (q, k, v, o, biases, q/k norms), two RMSNorm weights,
// the FFN (dense SwiGLU, or router + experts + qwen2_moe's shared expert and
// its gate), and the final norm. With active_only, a MoE layer counts only
// the top-k routed experts (the shared expert is always active).
double CountParams(const ModelConfig& c, bool active_only) {
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.q_dim());
  const double kv = static_cast<double>(c.kv_dim());
  double attention = h * q + 2 * h * kv + q * h;
  if (c.qkv_bias) attention += q + 2 * kv;
  if (c.attn_output_bias) attention += h;
  if (c.qk_norm == QkNorm::kPerHead) attention += 2.0 * static_cast<double>(c.head_dim);
  if (c.qk_norm == QkNorm::kFull) attention += q + kv;
  double total = static_cast<double>(c.vocab_size) * h * (c.tie_word_embeddings ? 1 : 2) + h;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    total += attention + 2 * h;
    if (!c.IsMoeLayer(l)) {
      total += 3 * h * static_cast<double>(c.intermediate_size);
      continue;
    }
    const double experts = static_cast<double>(active_only ? c.num_experts_per_tok : c.num_experts);
    total += h * static_cast<double>(c.num_experts);  // router
    total += experts * 3 * h * static_cast<double>(c.moe_intermediate_size);
    if (c.shared_expert_intermediate_size > 0) {
      total += 3 * h * static_cast<double>(c.shared_expert_intermediate_size) + h;
    }
  }
  return total;
}

struct Published {
  double total;   // parameters, as the model card states them
  double active;  // per token; = total for dense models
};

// The model cards' figures (Hugging Face pages and the models' papers).
const std::map<std::string, Published>& PublishedParams() {
  static const auto* m = new std::map<std::string, Published>{
      {"mixtral-8x7b", {46.7e9, 12.9e9}},      // Mixtral paper: 47B / 13B
      {"mixtral-8x22b", {141e9, 39e9}},        // Mistral: 141B / 39B active
      {"llama-2-7b", {6.74e9, 6.74e9}},        // HF: 6,738,415,616
      {"llama-2-13b", {13.0e9, 13.0e9}},       // HF: 13,015,864,320
      {"llama-2-70b", {69.0e9, 69.0e9}},       // HF: 68,976,648,192
      {"llama-3.1-8b", {8.03e9, 8.03e9}},      // HF: 8.03B
      {"llama-3.1-70b", {70.6e9, 70.6e9}},     // HF: 70.6B
      {"mistral-7b", {7.24e9, 7.24e9}},        // HF: 7.24B
      {"qwen1.5-moe-a2.7b", {14.3e9, 2.7e9}},  // Qwen: 14.3B total, 2.7B activated
      {"qwen2-57b-a14b", {57.4e9, 14.0e9}},    // HF: 57.4B; A14B
      {"qwen3-30b-a3b", {30.5e9, 3.3e9}},      // Qwen3 card: 30.5B / 3.3B activated
      {"olmoe-1b-7b", {6.92e9, 1.3e9}},        // OLMoE paper: 6.9B / 1.3B active
  };
  return *m;
}

TEST(ShippedModelsTest, EveryConfigParsesValidatesAndHasThePublishedSize) {
  const std::vector<fs::path> files = FilesIn(TANDEM_MODELS_DIR, ".json");
  ASSERT_GE(files.size(), 6u) << TANDEM_MODELS_DIR;
  std::printf("%-20s %-10s %7s %9s %9s %9s %9s\n", "model", "arch", "layers", "params", "published",
              "active", "published");
  std::set<std::string> seen;
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    const std::string name = f.stem().string();
    absl::StatusOr<nlohmann::json> j = json_util::ReadFile(f.string());
    ASSERT_TRUE(j.ok()) << j.status();
    absl::StatusOr<ModelConfig> c = ModelConfigFromHfJson(*j, f.string());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->Validate().ok());
    auto it = PublishedParams().find(name);
    ASSERT_NE(it, PublishedParams().end())
        << "add the model card's parameter count for " << name << " to the table";
    seen.insert(name);
    const double total = CountParams(*c, false);
    const double active = CountParams(*c, true);
    // Within 2% of the total; 3% of the active count, which cards round
    // harder ("A14B", "1.3B").
    EXPECT_NEAR(total / it->second.total, 1.0, 0.02) << total;
    EXPECT_NEAR(active / it->second.active, 1.0, 0.03) << active;
    std::printf("%-20s %-10s %7lld %8.2fB %8.2fB %8.2fB %8.2fB\n", name.c_str(),
                c->arch_name.c_str(), static_cast<long long>(c->num_layers), total / 1e9,
                it->second.total / 1e9, active / 1e9, it->second.active / 1e9);
  }
  // The shapes the papers run must be among them.
  for (const char* must : {"mixtral-8x7b", "mixtral-8x22b", "llama-2-70b", "llama-2-7b",
                           "qwen1.5-moe-a2.7b", "olmoe-1b-7b"}) {
    EXPECT_TRUE(seen.count(must)) << must;
  }
}

TEST(ShippedModelsTest, MixtralAndLlamaShapesAreThePapers) {
  // The shapes the planner's tests build by hand (Mixtral-8x7B: 32 layers,
  // hidden 4096, intermediate 14336, 32 q / 8 kv heads, 8 experts top-2,
  // vocab 32000; LLaMA-2-70B: 80 layers, hidden 8192, intermediate 28672,
  // 64 q / 8 kv heads), from the shipped files.
  absl::StatusOr<nlohmann::json> j =
      json_util::ReadFile(absl::StrCat(TANDEM_MODELS_DIR, "/mixtral-8x7b.json"));
  ASSERT_TRUE(j.ok()) << j.status();
  absl::StatusOr<ModelConfig> m = ModelConfigFromHfJson(*j, "mixtral-8x7b.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->arch, Arch::kMixtral);
  EXPECT_EQ(m->num_layers, 32);
  EXPECT_EQ(m->hidden_size, 4096);
  EXPECT_EQ(m->moe_intermediate_size, 14336);
  EXPECT_EQ(m->num_heads, 32);
  EXPECT_EQ(m->num_kv_heads, 8);
  EXPECT_EQ(m->head_dim, 128);
  EXPECT_EQ(m->num_experts, 8);
  EXPECT_EQ(m->num_experts_per_tok, 2);
  EXPECT_EQ(m->vocab_size, 32000);

  j = json_util::ReadFile(absl::StrCat(TANDEM_MODELS_DIR, "/llama-2-70b.json"));
  ASSERT_TRUE(j.ok()) << j.status();
  absl::StatusOr<ModelConfig> l = ModelConfigFromHfJson(*j, "llama-2-70b.json");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->arch, Arch::kLlama);
  EXPECT_FALSE(l->is_moe());
  EXPECT_EQ(l->num_layers, 80);
  EXPECT_EQ(l->hidden_size, 8192);
  EXPECT_EQ(l->intermediate_size, 28672);
  EXPECT_EQ(l->num_heads, 64);
  EXPECT_EQ(l->num_kv_heads, 8);
  EXPECT_EQ(l->vocab_size, 32000);
}

TEST(ShippedModelsTest, ParamCountOfMixtral8x7bWorkedOut) {
  // The counter itself, against a figure worked out by hand for
  // Mixtral-8x7B: per layer q,o 2 x 4096^2 = 33,554,432; k,v 2 x 4096 x
  // 1024 = 8,388,608; experts 8 x 3 x 4096 x 14336 = 1,409,286,144; router
  // 4096 x 8 = 32,768; norms 8,192; = 1,451,270,144 x 32 layers =
  // 46,440,644,608; + embeddings and LM head 2 x 32000 x 4096 = 262,144,000
  // + final norm 4,096 = 46,702,792,704 (the safetensors total).
  absl::StatusOr<nlohmann::json> j =
      json_util::ReadFile(absl::StrCat(TANDEM_MODELS_DIR, "/mixtral-8x7b.json"));
  ASSERT_TRUE(j.ok());
  absl::StatusOr<ModelConfig> m = ModelConfigFromHfJson(*j, "mixtral-8x7b.json");
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(CountParams(*m, false), 46702792704.0);
  // Active: 6 of 8 experts idle per layer: minus 32 x 6 x 176,160,768.
  EXPECT_DOUBLE_EQ(CountParams(*m, true), 46702792704.0 - 32.0 * 6 * 176160768);
}

}  // namespace
}  // namespace tandem
