#include "gpu_worker/device_spec.h"

#include "gpu_worker/cuda/device_info.h"
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

// A device the runtime could not describe is left out of the list; the
// ones after it are still found by their own index.
TEST(DeviceSpec, DevicesAreFoundByTheRuntimesIndex) {
  const std::vector<cuda::DeviceInfo> two_of_three = {{0, "a"}, {2, "c"}};
  EXPECT_TRUE(cuda::Lists(two_of_three, 0));
  EXPECT_FALSE(cuda::Lists(two_of_three, 1));
  EXPECT_TRUE(cuda::Lists(two_of_three, 2));
  EXPECT_FALSE(cuda::Lists(two_of_three, -1));
  EXPECT_FALSE(cuda::Lists({}, 0));
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
