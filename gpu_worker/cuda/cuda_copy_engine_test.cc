// The CUDA copy engine: pages land intact on the GPU and back, urgent copies
// overtake queued pages, and the weight pager streams through it. Skips
// itself where no GPU is visible.
#include "gpu_worker/cuda/cuda_copy_engine.h"

#include <cstring>
#include <random>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gpu_worker/cuda/device_info.h"
#include "gpu_worker/engine/weight_pager.h"
#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

class CudaCopyEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (ListDevices(&why).empty()) GTEST_SKIP() << "no GPU: " << why;
  }
};

TEST_F(CudaCopyEngineTest, UrgentCopiesOvertakeQueuedPagesAndDataLands) {
  auto engine = CudaCopyEngine::Create(0);
  ASSERT_TRUE(engine.ok()) << engine.status();
  constexpr size_t kPage = 1 << 16;
  std::vector<uint8_t> src(kPage * 10);
  std::mt19937 rng(std::random_device{}());
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  auto reg = HostRegistration::Register(src.data(), src.size());
  ASSERT_TRUE(reg.ok()) << reg.status();
  auto dev = DeviceBuffer::Allocate(src.size() + kPage);
  ASSERT_TRUE(dev.ok());
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification all;
  auto record = [&](int id) {
    return [&, id](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      absl::MutexLock lock(&mu);
      order.push_back(id);
      if (order.size() == 11) all.Notify();
    };
  };
  (*engine)->Pause(true);
  for (int i = 0; i < 10; ++i) {
    (*engine)->Copy({dev->as<uint8_t>() + i * kPage, src.data() + i * kPage, kPage}, false,
                    record(i));
  }
  (*engine)->Copy({dev->as<uint8_t>() + 10 * kPage, src.data(), kPage}, true, record(100));
  (*engine)->Pause(false);
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(order, (std::vector<int>{100, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  std::vector<uint8_t> back(src.size());
  ASSERT_EQ(cudaMemcpy(back.data(), dev->data(), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, src);
}

TEST_F(CudaCopyEngineTest, TheWeightPagerStreamsIntoGpuStaging) {
  auto engine = CudaCopyEngine::Create(0);
  ASSERT_TRUE(engine.ok());
  std::vector<std::vector<uint8_t>> layers(3, std::vector<uint8_t>(300000));
  std::mt19937 rng(1);
  for (auto& l : layers) {
    for (auto& b : l) b = static_cast<uint8_t>(rng());
  }
  std::vector<StreamedLayer> streamed;
  for (size_t i = 0; i < layers.size(); ++i) {
    streamed.push_back({static_cast<int64_t>(i), {{layers[i].data(), layers[i].size()}}});
  }
  auto s0 = DeviceBuffer::Allocate(1 << 20);
  auto s1 = DeviceBuffer::Allocate(1 << 20);
  ASSERT_TRUE(s0.ok() && s1.ok());
  auto pager = WeightPager::Create(streamed, s0->data(), s1->data(), 1 << 20, 1 << 16,
                                   engine->get());
  ASSERT_TRUE(pager.ok()) << pager.status();
  for (int step = 0; step < 2; ++step) {
    (*pager)->BeginStep();
    for (size_t i = 0; i < layers.size(); ++i) {
      auto at = (*pager)->Acquire(static_cast<int64_t>(i));
      ASSERT_TRUE(at.ok()) << at.status();
      std::vector<uint8_t> back(layers[i].size());
      ASSERT_EQ(cudaMemcpy(back.data(), (*at)[0], back.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(back, layers[i]) << "step " << step << " layer " << i;
      (*pager)->Release(static_cast<int64_t>(i));
    }
  }
}

}  // namespace
}  // namespace tandem::cuda
