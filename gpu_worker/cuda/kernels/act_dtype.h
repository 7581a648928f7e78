// Element types of activations and KV the CUDA kernels read and write, for
// host code that must not see CUDA types. Device code converts through
// device_math.cuh.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_ACT_DTYPE_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_ACT_DTYPE_H_

namespace tandem::cuda {

enum class ActType : int {
  kF32 = 0,
  kBF16 = 1,  // raw 16-bit bf16 (the upper half of an f32)
};

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_ACT_DTYPE_H_
