#include "gpu_worker/cuda/kernels/sampling.h"

#include <cmath>

#include "gpu_worker/cuda/kernels/device_math.cuh"

namespace tandem::cuda {
namespace {

// (value, index) pairs: the larger value wins, equal values the lower index.
__device__ __forceinline__ void Better(float& v, int32_t& i, float ov, int32_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

// The row's largest value and its index (the first on ties; NaNs skipped
// wherever they stand; token 0 for a row of NaNs only, as the host's
// ArgMax), in every thread of the block. blockDim.x a multiple of 32, at
// most 1024. Starting from -inf, a -inf logit is taken on the index rule,
// so a row of NaNs and -infs picks its first -inf, as on the host.
__device__ void BlockArgmax(const float* __restrict__ row, int64_t vocab, float& best,
                            int32_t& at) {
  float v = -INFINITY;
  int32_t idx = INT32_MAX;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    Better(v, idx, row[j], static_cast<int32_t>(j));  // a NaN compares false: never taken
  }
  for (int o = 16; o > 0; o >>= 1) {
    Better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  }
  __shared__ float sv[32];
  __shared__ int32_t si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) Better(v, idx, sv[w], si[w]);
    if (idx == INT32_MAX) idx = 0;
    si[0] = idx;
  }
  __syncthreads();
  at = si[0];
  best = row[at];
}

__global__ void ArgmaxKernel(const float* __restrict__ logits, int64_t vocab,
                             int32_t* __restrict__ ids) {
  float best;
  int32_t at;
  BlockArgmax(logits + blockIdx.x * vocab, vocab, best, at);
  if (threadIdx.x == 0) ids[blockIdx.x] = at;
}

// The argmax and its log-softmax, as the host's ArgMax and LogProb: the
// maximum and the sum of exp(l - max) in double.
__global__ void GreedyPickKernel(const float* __restrict__ logits, int64_t vocab,
                                 int32_t* __restrict__ ids, float* __restrict__ logprobs) {
  const float* row = logits + blockIdx.x * vocab;
  float best;
  int32_t at;
  BlockArgmax(row, vocab, best, at);
  const double mx = best;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    sum += exp(static_cast<double>(row[j]) - mx);
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  __shared__ double ss[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) ss[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) sum += ss[w];
    ids[blockIdx.x] = at;
    logprobs[blockIdx.x] = static_cast<float>(static_cast<double>(best) - mx - log(sum));
  }
}

}  // namespace

int LaunchArgmax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, void* stream) {
  if (vocab < 1) return static_cast<int>(cudaErrorInvalidValue);
  if (rows == 0) return 0;
  ArgmaxKernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, vocab, ids);
  return static_cast<int>(cudaGetLastError());
}

int LaunchGreedyPick(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                     float* logprobs, void* stream) {
  if (vocab < 1) return static_cast<int>(cudaErrorInvalidValue);
  if (rows == 0) return 0;
  GreedyPickKernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, vocab, ids, logprobs);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
