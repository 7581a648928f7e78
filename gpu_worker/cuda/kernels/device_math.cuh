// Device helpers shared by the kernels: f32 <-> bf16 conversion, warp and
// block reductions, and dispatch of a launch on an ActType.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_DEVICE_MATH_CUH_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_DEVICE_MATH_CUH_

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gpu_worker/cuda/kernels/act_dtype.h"

namespace tandem::cuda {

__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromF32(float x);
template <>
__device__ __forceinline__ float FromF32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);  // round to nearest even, as the host's F32ToBf16
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

// Blocks of `threads` for a grid-stride loop over n elements: enough to
// cover them, at most 65535 (the loop covers the rest), at least one.
inline unsigned GridStrideBlocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

}  // namespace tandem::cuda

// Runs `body` with `T` bound to the element type of `type`.
#define TANDEM_DISPATCH_ACT(type, T, ...)          \
  do {                                             \
    if ((type) == ::tandem::cuda::ActType::kF32) { \
      using T = float;                             \
      __VA_ARGS__;                                 \
    } else {                                       \
      using T = __nv_bfloat16;                     \
      __VA_ARGS__;                                 \
    }                                              \
  } while (0)

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_DEVICE_MATH_CUH_
