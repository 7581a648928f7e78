// Host launchers of the small f32 row kernels the CUDA device's layer loop
// needs beside the others: y += s * x, bias rows, scatter-add of expert
// rows, the shared expert's sigmoid gate. Plain header (no CUDA types);
// device pointers; each returns the launch's cudaError_t as an int.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_ROW_OPS_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_ROW_OPS_H_

#include <cstdint>

namespace tandem::cuda {

// y[i] += scale * x[i] for i < n (one fused multiply-add, as ops::AddScaled).
int LaunchAddScaled(const float* x, float scale, int64_t n, float* y, void* stream);

// y[r, :] += bias[:] for r < rows, rows of `width`.
int LaunchAddBias(const float* bias, int64_t rows, int64_t width, float* y, void* stream);

// out[rows[i], :] += scales[i] * x[i, :] for i < n (rows distinct, so no
// two threads add to one element).
int LaunchScatterAddRows(const float* x, int64_t width, const int32_t* rows, const float* scales,
                         int64_t n, float* out, void* stream);

// out[t, :] += sigmoid(h[t, :] · gate) * x[t, :] for t < rows; the dot in
// f32 over the block.
int LaunchSigmoidGateAdd(const float* x, const float* h, const float* gate, int64_t rows,
                         int64_t width, float* out, void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_ROW_OPS_H_
