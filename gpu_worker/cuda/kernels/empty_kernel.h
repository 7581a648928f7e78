// Host launcher of an empty kernel: what a launch costs with no work.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_EMPTY_KERNEL_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_EMPTY_KERNEL_H_

namespace tandem::cuda {

// One block of one thread that does nothing, on `stream` (a cudaStream_t).
// Returns the launch's cudaError_t as an int.
int LaunchEmptyKernel(void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_EMPTY_KERNEL_H_
