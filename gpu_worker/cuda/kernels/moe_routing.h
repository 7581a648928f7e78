// Host launchers of the CUDA mixture-of-experts routing kernels: router
// softmax + top-k, and the permutation of tokens into per-expert groups and
// back. Plain header (no CUDA types); device pointers; `stream` a
// cudaStream_t or nullptr; each returns the launch's cudaError_t as an int.
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_MOE_ROUTING_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_MOE_ROUTING_H_

#include <cstdint>

#include "gpu_worker/cuda/kernels/act_dtype.h"

namespace tandem::cuda {

// The most experts per layer and per token the routing kernels handle.
inline constexpr int64_t kMaxRoutedExperts = 1024;
inline constexpr int64_t kMaxTopK = 32;

// ops::RouteTopK on the GPU: for each of n tokens, softmax over `experts`
// logits in f32, keep the top k (ties to the lower index), optionally
// renormalise. ids/weights [n, k] sorted by weight descending. Returns
// cudaErrorInvalidValue (as an int) for experts or k out of range.
int LaunchRouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k, bool renormalize,
                    int32_t* ids, float* weights, void* stream);

// Groups the n * k (token, choice) pairs of ids [n, k] by expert, stable in
// token order: expert e's rows are [offsets[e], offsets[e + 1]) of the
// grouped order; row_of[p] is the grouped row of pair p = token * k + j and
// token_of[row] the token a grouped row holds. offsets has experts + 1
// entries. One block: meant for decode and prefill chunk sizes (n * k up to
// a few tens of thousands).
int LaunchMoePermute(const int32_t* ids, int64_t n, int64_t k, int64_t experts, int32_t* offsets,
                     int32_t* row_of, int32_t* token_of, void* stream);

// out[row, :] = x[token_of[row], :] for row < rows (x and out in `type`).
int LaunchGatherRows(const void* x, int64_t hidden, const int32_t* token_of, int64_t rows,
                     void* out, ActType type, void* stream);

// out[t, :] = sum over the token's k choices, in ascending expert id (the
// host engine's order), of weights[t, j] * expert_out[row_of[t * k + j], :],
// accumulated in f32 from zero with fused multiply-adds. out [n, hidden] f32.
int LaunchMoeUnpermute(const void* expert_out, ActType type, int64_t hidden, const int32_t* ids,
                       const int32_t* row_of, const float* weights, int64_t n, int64_t k,
                       float* out, void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_MOE_ROUTING_H_
