#include <cuda_runtime.h>

#include "gpu_worker/cuda/kernels/empty_kernel.h"

namespace tandem::cuda {
namespace {

__global__ void EmptyKernel() {}

}  // namespace

int LaunchEmptyKernel(void* stream) {
  EmptyKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>();
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
