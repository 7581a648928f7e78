// The measured CUDA profile: every figure positive and the profile valid
// for the planner, in the order any real GPU puts them (HBM faster than
// PCIe; tensor-core bf16 and int8 GEMMs faster than f32). Skips itself where
// no GPU is visible.
#include "gpu_worker/cuda/cuda_profile.h"

#include <string>

#include "gpu_worker/cuda/device_info.h"
#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

TEST(CudaProfile, MeasuresEveryFigureOfTheDevice) {
  std::string why;
  if (ListDevices(&why).empty()) GTEST_SKIP() << "no GPU: " << why;
  HardwareProfile hw;
  hw.name = "measured";
  hw.source = "cuda_profile_test";
  CudaProfileOptions o;
  o.copy_bytes = 64 << 20;
  o.hbm_bytes = 256 << 20;
  o.gemm_size = 4096;
  o.f32_gemm_size = 2048;
  o.repeats = 3;
  ASSERT_TRUE(MeasureCudaProfile(o, &hw).ok());
  EXPECT_EQ(hw.gpu.count, 1);
  EXPECT_GT(hw.gpu.memory_bytes, int64_t{1} << 30);
  EXPECT_GT(hw.link.h2d_bandwidth, 1e9);
  EXPECT_GT(hw.link.d2h_bandwidth, 1e9);
  EXPECT_GT(hw.link.h2d_latency_s, 0);
  EXPECT_LT(hw.link.h2d_latency_s, 1e-3);
  EXPECT_GT(hw.gpu.memory_bandwidth, hw.link.h2d_bandwidth);
  EXPECT_GT(hw.gpu.launch_overhead_s, 0);
  EXPECT_LT(hw.gpu.launch_overhead_s, 1e-4);
  EXPECT_GT(hw.gpu.bf16_flops, hw.gpu.f32_flops);
  EXPECT_GT(hw.gpu.int8_ops, hw.gpu.f32_flops);
  std::printf("%s: HBM %.0f GB/s, H2D %.1f GB/s (%.1f us), D2H %.1f GB/s, bf16 %.0f TFLOP/s, "
              "f32 %.1f, int8 %.0f TOP/s, launch %.2f us\n",
              hw.gpu.name.c_str(), hw.gpu.memory_bandwidth / 1e9, hw.link.h2d_bandwidth / 1e9,
              hw.link.h2d_latency_s * 1e6, hw.link.d2h_bandwidth / 1e9, hw.gpu.bf16_flops / 1e12,
              hw.gpu.f32_flops / 1e12, hw.gpu.int8_ops / 1e12, hw.gpu.launch_overhead_s * 1e6);
}

TEST(CudaProfile, BadOptionsAreRefusedWithoutTouchingTheDevice) {
  HardwareProfile hw;
  CudaProfileOptions o;
  o.repeats = 0;
  EXPECT_EQ(MeasureCudaProfile(o, &hw).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::cuda
