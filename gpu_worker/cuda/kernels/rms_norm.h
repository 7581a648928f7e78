// Host launcher of the CUDA RMSNorm kernel. Plain header: no CUDA types, so
// host code built by the C++ compiler can call it.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_RMS_NORM_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_RMS_NORM_H_

#include <cstdint>

namespace tandem::cuda {

// out[r, :] = w * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)) on device pointers
// (f32; out may be x), computed as ops::RmsNorm computes it, on `stream` (a
// cudaStream_t, or nullptr for the default stream). Returns the cudaError_t
// of the launch as an int (0 = success).
int LaunchRmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                  float* out, void* stream);

// The two halves of an RMSNorm whose rows are split over tensor-parallel
// ranks, the ranks' sums added in between: out[r] = sum of x[r, :]^2 (f32
// squares summed in double, as the host device), then x[r, :] = w * (x[r, :]
// / sqrt(sumsq[r] / full_dim + eps)) in place.
int LaunchRowSumSquares(const float* x, int64_t rows, int64_t dim, float* out, void* stream);
int LaunchScaleRms(float* x, int64_t rows, int64_t dim, const float* sumsq, int64_t full_dim,
                   float eps, const float* w, void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_RMS_NORM_H_
