#include <cuda_runtime.h>

#include "gpu_worker/cuda/kernels/rms_norm.h"

namespace tandem::cuda {
namespace {

// One block per row; threads stride over the row, then a shared-memory tree
// reduction of the sum of squares. As ops::RmsNorm: f32 squares summed in
// double, their mean rounded to f32, 1 / sqrt (correctly rounded, not
// rsqrtf), w * (x * r). x and out may be the same row (the engine's per-head
// q/k norms run in place): each element is read and then written by the
// same thread, and the reduction reads only `partial`, so they are not
// __restrict__.
__global__ void RmsNormKernel(const float* x, int64_t dim, const float* __restrict__ w, float eps,
                              float* out) {
  extern __shared__ double partial[];
  const float* row = x + blockIdx.x * dim;
  float* orow = out + blockIdx.x * dim;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    sum += static_cast<double>(row[i] * row[i]);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float mean = static_cast<float>(partial[0] / static_cast<double>(dim));
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = w[i] * (row[i] * inv);
}

// One block per row, as RmsNormKernel, with a double sum.
__global__ void RowSumSquaresKernel(const float* __restrict__ x, int64_t dim,
                                    float* __restrict__ out) {
  extern __shared__ double dpartial[];
  const float* row = x + blockIdx.x * dim;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += static_cast<double>(row[i] * row[i]);
  dpartial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) dpartial[threadIdx.x] += dpartial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<float>(dpartial[0]);
}

__global__ void ScaleRmsKernel(float* __restrict__ x, int64_t dim, const float* __restrict__ sumsq,
                               float full_dim, float eps, const float* __restrict__ w) {
  float* row = x + blockIdx.x * dim;
  const float inv = 1.0f / sqrtf(sumsq[blockIdx.x] / full_dim + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = w[i] * (row[i] * inv);
}

}  // namespace

int LaunchRowSumSquares(const float* x, int64_t rows, int64_t dim, float* out, void* stream) {
  if (rows == 0) return 0;
  constexpr int kThreads = 256;
  RowSumSquaresKernel<<<static_cast<unsigned>(rows), kThreads, kThreads * sizeof(double),
                        static_cast<cudaStream_t>(stream)>>>(x, dim, out);
  return static_cast<int>(cudaGetLastError());
}

int LaunchScaleRms(float* x, int64_t rows, int64_t dim, const float* sumsq, int64_t full_dim,
                   float eps, const float* w, void* stream) {
  if (rows == 0) return 0;
  constexpr int kThreads = 256;
  ScaleRmsKernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, dim, sumsq, static_cast<float>(full_dim), eps, w);
  return static_cast<int>(cudaGetLastError());
}

int LaunchRmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                  float* out, void* stream) {
  if (rows == 0) return 0;
  constexpr int kThreads = 256;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, kThreads * sizeof(double),
                  static_cast<cudaStream_t>(stream)>>>(x, dim, w, eps, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
