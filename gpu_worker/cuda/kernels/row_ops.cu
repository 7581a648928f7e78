#include "gpu_worker/cuda/kernels/row_ops.h"

#include "gpu_worker/cuda/kernels/device_math.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return GridStrideBlocks(n, kThreads); }

__global__ void AddScaledKernel(const float* __restrict__ x, float scale, int64_t n,
                                float* __restrict__ y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = fmaf(scale, x[i], y[i]);
  }
}

__global__ void AddBiasKernel(const float* __restrict__ bias, int64_t n, int64_t width,
                              float* __restrict__ y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[i % width];
  }
}

// One block per row of x.
__global__ void ScatterAddRowsKernel(const float* __restrict__ x, int64_t width,
                                     const int32_t* __restrict__ rows,
                                     const float* __restrict__ scales, float* __restrict__ out) {
  const int64_t i = blockIdx.x;
  const float s = scales[i];
  const float* xi = x + i * width;
  float* o = out + static_cast<int64_t>(rows[i]) * width;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) o[j] = fmaf(s, xi[j], o[j]);
}

// One block per row.
__global__ void SigmoidGateAddKernel(const float* __restrict__ x, const float* __restrict__ h,
                                     const float* __restrict__ gate, int64_t width,
                                     float* __restrict__ out) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float* ht = h + t * width;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) dot = fmaf(ht[j], gate[j], dot);
  dot = BlockSum(dot, scratch);
  const float g = 1.0f / (1.0f + expf(-dot));
  const float* xt = x + t * width;
  float* o = out + t * width;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) o[j] = fmaf(g, xt[j], o[j]);
}

}  // namespace

int LaunchAddScaled(const float* x, float scale, int64_t n, float* y, void* stream) {
  if (n <= 0) return cudaSuccess;
  AddScaledKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, scale, n, y);
  return cudaGetLastError();
}

int LaunchAddBias(const float* bias, int64_t rows, int64_t width, float* y, void* stream) {
  const int64_t n = rows * width;
  if (n <= 0) return cudaSuccess;
  AddBiasKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(bias, n, width, y);
  return cudaGetLastError();
}

int LaunchScatterAddRows(const float* x, int64_t width, const int32_t* rows, const float* scales,
                         int64_t n, float* out, void* stream) {
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  ScatterAddRowsKernel<<<static_cast<unsigned>(n), kThreads, 0,
                         static_cast<cudaStream_t>(stream)>>>(x, width, rows, scales, out);
  return cudaGetLastError();
}

int LaunchSigmoidGateAdd(const float* x, const float* h, const float* gate, int64_t rows,
                         int64_t width, float* out, void* stream) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  SigmoidGateAddKernel<<<static_cast<unsigned>(rows), kThreads, 0,
                         static_cast<cudaStream_t>(stream)>>>(x, h, gate, width, out);
  return cudaGetLastError();
}

}  // namespace tandem::cuda
