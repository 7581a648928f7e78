// Host launchers of the CUDA elementwise kernels: embedding lookup, RMSNorm
// fused with the residual add, RoPE, SwiGLU, dtype conversion. Plain header:
// no CUDA types. Pointers are device pointers; `stream` is a cudaStream_t
// (nullptr: the default stream). Each returns the launch's cudaError_t as an
// int (0 = success). Activations are f32 or bf16 (ActType) with f32 math.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_ELEMENTWISE_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_ELEMENTWISE_H_

#include <cstdint>

#include "gpu_worker/cuda/kernels/act_dtype.h"

namespace tandem::cuda {

// out[r, :] = table[ids[r], :] for r < n; table [vocab, hidden] in
// `table_type`, out in `out_type`. An id outside [0, vocab) gives a zero row
// (callers validate ids; the kernel never reads out of bounds).
int LaunchEmbedding(const void* table, ActType table_type, int64_t vocab, int64_t hidden,
                    const int32_t* ids, int64_t n, void* out, ActType out_type, void* stream);

// For each row: residual += delta (if delta is not null; delta in `type`),
// then out = residual * rsqrt(mean(residual^2) + eps) * w, out in `type`.
// residual [rows, dim] f32 (the residual stream stays f32, as on the host).
int LaunchAddRmsNorm(float* residual, const void* delta, int64_t rows, int64_t dim,
                     const float* w, float eps, void* out, ActType type, void* stream);

// Rotates x [tokens, heads, head_dim] in place, token t at positions[t], the
// first 2 * half dims of each head with inv_freq [half]: neox pairs
// (i, i + half), interleaved pairs (2i, 2i + 1) (ops::ApplyRope).
int LaunchRope(void* x, ActType type, int64_t tokens, int64_t heads, int64_t head_dim,
               const int64_t* positions, const float* inv_freq, int64_t half, bool interleaved,
               void* stream);

// out[i] = silu(gate[i]) * up[i] for i < n (out may alias gate).
int LaunchSwiGlu(const void* gate, const void* up, int64_t n, void* out, ActType type,
                 void* stream);

// out[i] = in[i] converted (bf16 rounding to nearest even).
int LaunchConvert(const void* in, ActType in_type, void* out, ActType out_type, int64_t n,
                  void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_ELEMENTWISE_H_
