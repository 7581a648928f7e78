// Every CUDA kernel against the CPU reference on fresh random inputs. Skips
// itself, with the runtime's reason, where no GPU is visible.
#include <cmath>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "cpu_worker/ops/elementwise.h"
#include "gpu_worker/cuda/cuda_status.h"
#include "gpu_worker/cuda/device_info.h"
#include "gpu_worker/cuda/kernels/rms_norm.h"
#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (ListDevices(&why).empty()) GTEST_SKIP() << "no GPU: " << why;
  }
};

TEST_F(CudaKernels, RmsNormMatchesCpuReference) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  for (int64_t dim : {1, 64, 576, 4097}) {
    const int64_t rows = 7;
    std::vector<float> x(rows * dim), w(dim), want(rows * dim), got(rows * dim);
    for (auto& v : x) v = dist(rng);
    for (auto& v : w) v = dist(rng);
    ops::RmsNorm(x.data(), rows, dim, w.data(), 1e-5f, want.data());
    float *dx, *dw, *dout;
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, x.size() * 4), cudaSuccess);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
    ASSERT_EQ(LaunchRmsNorm(dx, rows, dim, dw, 1e-5f, dout, nullptr), 0);
    ASSERT_TRUE(CudaStatus(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost),
                           "copy back", __FILE__, __LINE__)
                    .ok());
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dout);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i])))
          << "dim " << dim << " i " << i << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace tandem::cuda
