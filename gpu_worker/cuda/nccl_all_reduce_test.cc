// NCCL all-reduce across the visible GPUs, one thread per GPU: every rank
// gets the same sums, equal to the host's within f32 rounding. Skips itself
// with fewer than two GPUs.
#include "gpu_worker/cuda/nccl_all_reduce.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gpu_worker/cuda/device_info.h"
#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

TEST(NcclAllReduce, RanksOnEveryGpuGetTheSameSums) {
  std::string why;
  const auto devices = ListDevices(&why);
  if (devices.size() < 2) GTEST_SKIP() << "needs two GPUs, found " << devices.size() << " " << why;
  const int size = static_cast<int>(devices.size());
  auto id = NewNcclGroupId();
  ASSERT_TRUE(id.ok()) << id.status();
  const int64_t n = 100003;
  std::vector<std::vector<float>> in(size), out(size);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> d;
  for (auto& v : in) {
    v.resize(n);
    for (float& x : v) x = d(rng);
  }
  std::vector<absl::Status> status(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto ar = NcclAllReduce::Create(*id, r, size, devices[r].index);
      if (!ar.ok()) {
        status[r] = ar.status();
        return;
      }
      auto buf = DeviceBuffer::Allocate(n * sizeof(float));
      if (!buf.ok()) {
        status[r] = buf.status();
        return;
      }
      // cudaMemcpy from pageable memory may return before the DMA lands,
      // and NCCL's stream does not wait for the legacy stream: synchronise.
      if (cudaMemcpy(buf->data(), in[r].data(), n * sizeof(float), cudaMemcpyHostToDevice) !=
              cudaSuccess ||
          cudaDeviceSynchronize() != cudaSuccess) {
        status[r] = absl::InternalError("copying the rank's input to the GPU failed");
        return;
      }
      status[r] = (*ar)->Sum(buf->as<float>(), n);
      out[r].resize(n);
      if (cudaMemcpy(out[r].data(), buf->data(), n * sizeof(float), cudaMemcpyDeviceToHost) !=
          cudaSuccess) {
        status[r] = absl::InternalError("copying the rank's sum back failed");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += in[r][i];
    ASSERT_NEAR(out[0][i], want, 1e-4 * (1 + std::fabs(want))) << i;
    for (int r = 1; r < size; ++r) ASSERT_EQ(out[r][i], out[0][i]) << "rank " << r << " " << i;
  }
}

TEST(NcclAllReduce, MalformedGroupsAreRefused) {
  EXPECT_EQ(NcclAllReduce::Create("short", 0, 2, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclAllReduce::Create(std::string(128, 'x'), 2, 2, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::cuda
