#include "gpu_worker/cuda/device_info.h"

#include <cuda_runtime.h>

namespace tandem::cuda {

std::vector<DeviceInfo> ListDevices(std::string* why_none) {
  std::vector<DeviceInfo> out;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why_none) *why_none = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, static_cast<int64_t>(p.totalGlobalMem)});
  }
  if (out.empty() && why_none) *why_none = "no CUDA device visible";
  return out;
}

}  // namespace tandem::cuda
