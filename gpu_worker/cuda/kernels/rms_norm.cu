#include <cuda_runtime.h>

#include "gpu_worker/cuda/kernels/rms_norm.h"

namespace tandem::cuda {
namespace {

// One block per row; threads stride over the row, then a shared-memory tree
// reduction of the sum of squares (f32 accumulation, as the CPU reference).
__global__ void RmsNormKernel(const float* __restrict__ x, int64_t dim,
                              const float* __restrict__ w, float eps, float* __restrict__ out) {
  extern __shared__ float partial[];
  const float* row = x + blockIdx.x * dim;
  float* orow = out + blockIdx.x * dim;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += row[i] * row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = row[i] * inv * w[i];
}

}  // namespace

int LaunchRmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                  float* out, void* stream) {
  if (rows == 0) return 0;
  constexpr int kThreads = 256;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, kThreads * sizeof(float),
                  static_cast<cudaStream_t>(stream)>>>(x, dim, w, eps, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
