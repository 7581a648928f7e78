// Host launchers of the CUDA greedy sampler. Plain header (no CUDA types).
#ifndef TANDEM_GPU_WORKER_CUDA_KERNELS_SAMPLING_H_
#define TANDEM_GPU_WORKER_CUDA_KERNELS_SAMPLING_H_

#include <cstdint>

namespace tandem::cuda {

// ids[r] = the index of the largest of logits[r, 0 .. vocab) (the first on
// ties, as std::max_element; NaNs never win). Returns the launch's
// cudaError_t as an int.
int LaunchArgmax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, void* stream);

// Greedy sampling of each row: ids[r] as LaunchArgmax, logprobs[r] its
// log-softmax (ops::LogProb: max and sum of exponentials in double), so a
// step of greedy requests copies two numbers per row to the host instead
// of the row's logits.
int LaunchGreedyPick(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                     float* logprobs, void* stream);

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_KERNELS_SAMPLING_H_
