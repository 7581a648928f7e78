#include "gpu_worker/device_spec.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(DeviceSpec, HostIsTheEnginesDefault) {
  auto f = DeviceFactoryFor("host");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f, nullptr);
}

TEST(DeviceSpec, MalformedNamesAreInvalidArgument) {
  for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "HOST"}) {
    EXPECT_EQ(DeviceFactoryFor(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DeviceSpec, CudaNeedsTheBuildAndAVisibleGpu) {
  // A GPU this machine surely lacks.
  const auto far = DeviceFactoryFor("cuda:4096");
  EXPECT_EQ(far.status().code(), BuiltWithCuda() ? absl::StatusCode::kFailedPrecondition
                                                  : absl::StatusCode::kUnimplemented)
      << far.status();
  EXPECT_FALSE(far.status().message().empty());
}

}  // namespace
}  // namespace tandem
