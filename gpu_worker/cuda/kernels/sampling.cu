#include "gpu_worker/cuda/kernels/sampling.h"

#include <cfloat>

#include "gpu_worker/cuda/kernels/device_math.cuh"

namespace tandem::cuda {
namespace {

// (value, index) pairs: the larger value wins, equal values the lower index.
__device__ __forceinline__ void Better(float& v, int32_t& i, float ov, int32_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void ArgmaxKernel(const float* __restrict__ logits, int64_t vocab,
                             int32_t* __restrict__ ids) {
  const float* row = logits + blockIdx.x * vocab;
  float v = -FLT_MAX;
  int32_t idx = INT32_MAX;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    Better(v, idx, row[j], static_cast<int32_t>(j));  // a NaN compares false: never taken
  }
  for (int o = 16; o > 0; o >>= 1) {
    Better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  }
  __shared__ float sv[32];
  __shared__ int32_t si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) Better(v, idx, sv[w], si[w]);
    // All -inf or NaN: token 0, as the host's max_element over such a row.
    ids[blockIdx.x] = idx == INT32_MAX ? 0 : idx;
  }
}

}  // namespace

int LaunchArgmax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, void* stream) {
  if (vocab < 1) return static_cast<int>(cudaErrorInvalidValue);
  if (rows == 0) return 0;
  ArgmaxKernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, vocab, ids);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
