#include "gpu_worker/cuda/kernels/moe_routing.h"

#include "gpu_worker/cuda/kernels/device_math.cuh"

namespace tandem::cuda {
namespace {

// One thread per token: experts are few (<= kMaxRoutedExperts) and k small,
// so a serial softmax and k selection passes per token are cheap next to
// the router GEMM. The arithmetic follows ops::RouteTopK: max subtraction,
// expf, a left-to-right f32 sum, division.
__global__ void RouteTopKKernel(const float* __restrict__ logits, int64_t n, int64_t experts,
                                int64_t k, bool renormalize, int32_t* __restrict__ ids,
                                float* __restrict__ weights) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n) return;
  const float* l = logits + t * experts;
  float mx = l[0];
  for (int64_t e = 1; e < experts; ++e) mx = fmaxf(mx, l[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < experts; ++e) sum += expf(l[e] - mx);
  int32_t chosen[kMaxTopK];
  float prob[kMaxTopK];
  float kept = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float bp = -1.0f;
    for (int64_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= chosen[i] == e;
      if (taken) continue;
      const float p = expf(l[e] - mx) / sum;
      // Strictly greater: ties keep the lower index. The first expert not
      // yet taken is kept whatever its p, so that a NaN (a NaN logit, or
      // an infinite one: inf - inf) never leaves `best` at -1, an id the
      // caller would index with; the host's partial_sort also returns k
      // distinct experts then.
      if (best < 0 || p > bp) {
        bp = p;
        best = static_cast<int32_t>(e);
      }
    }
    chosen[j] = best;
    prob[j] = bp;
    kept += bp;
  }
  for (int64_t j = 0; j < k; ++j) {
    ids[t * k + j] = chosen[j];
    weights[t * k + j] = renormalize ? prob[j] / kept : prob[j];
  }
}

// One block. Counts per expert (atomics), an exclusive scan by one thread,
// then each thread places the pairs of its experts in token order, which
// makes the grouping deterministic.
__global__ void MoePermuteKernel(const int32_t* __restrict__ ids, int64_t pairs, int64_t experts,
                                 int32_t* __restrict__ offsets, int32_t* __restrict__ row_of,
                                 int32_t* __restrict__ token_of, int64_t k) {
  extern __shared__ int32_t count[];  // [experts + 1]
  for (int64_t e = threadIdx.x; e <= experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = ids[p];
    if (e >= 0 && e < experts) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const int32_t c = count[e];
      count[e] = run;
      offsets[e] = run;
      run += c;
    }
    offsets[experts] = run;
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int32_t at = count[e];
    for (int64_t p = 0; p < pairs; ++p) {
      if (ids[p] != e) continue;
      row_of[p] = at;
      token_of[at] = static_cast<int32_t>(p / k);
      ++at;
    }
  }
  // Pairs with an expert id out of range (never produced by RouteTopK) get
  // no row.
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    if (ids[p] < 0 || ids[p] >= experts) row_of[p] = -1;
  }
}

template <typename T>
__global__ void GatherRowsKernel(const T* __restrict__ x, int64_t hidden,
                                 const int32_t* __restrict__ token_of, T* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const T* src = x + static_cast<int64_t>(token_of[r]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[r * hidden + i] = src[i];
}

template <typename T>
__global__ void MoeUnpermuteKernel(const T* __restrict__ expert_out, int64_t hidden,
                                   const int32_t* __restrict__ ids,
                                   const int32_t* __restrict__ row_of,
                                   const float* __restrict__ weights, int64_t k,
                                   float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  // The token's choices in ascending expert id (k is small: selection).
  int32_t order[kMaxTopK];
  for (int64_t j = 0; j < k; ++j) order[j] = static_cast<int32_t>(j);
  for (int64_t a = 0; a < k; ++a) {
    for (int64_t b = a + 1; b < k; ++b) {
      if (ids[t * k + order[b]] < ids[t * k + order[a]]) {
        const int32_t tmp = order[a];
        order[a] = order[b];
        order[b] = tmp;
      }
    }
  }
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float acc = 0.0f;
    for (int64_t a = 0; a < k; ++a) {
      const int64_t p = t * k + order[a];
      const int32_t row = row_of[p];
      if (row < 0) continue;
      acc = fmaf(weights[p], ToF32(expert_out[static_cast<int64_t>(row) * hidden + i]), acc);
    }
    out[t * hidden + i] = acc;
  }
}

}  // namespace

int LaunchRouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k, bool renormalize,
                    int32_t* ids, float* weights, void* stream) {
  if (experts < 1 || experts > kMaxRoutedExperts || k < 1 || k > kMaxTopK || k > experts) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (n == 0) return 0;
  constexpr int kThreads = 128;
  RouteTopKKernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                    static_cast<cudaStream_t>(stream)>>>(logits, n, experts, k, renormalize, ids,
                                                         weights);
  return static_cast<int>(cudaGetLastError());
}

int LaunchMoePermute(const int32_t* ids, int64_t n, int64_t k, int64_t experts, int32_t* offsets,
                     int32_t* row_of, int32_t* token_of, void* stream) {
  if (experts < 1 || experts > kMaxRoutedExperts || k < 1 || k > kMaxTopK) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  MoePermuteKernel<<<1, 1024, static_cast<size_t>(experts + 1) * sizeof(int32_t),
                     static_cast<cudaStream_t>(stream)>>>(ids, n * k, experts, offsets, row_of,
                                                          token_of, k);
  return static_cast<int>(cudaGetLastError());
}

int LaunchGatherRows(const void* x, int64_t hidden, const int32_t* token_of, int64_t rows,
                     void* out, ActType type, void* stream) {
  if (rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  TANDEM_DISPATCH_ACT(type, T, {
    GatherRowsKernel<<<static_cast<unsigned>(rows), 256, 0, s>>>(
        static_cast<const T*>(x), hidden, token_of, static_cast<T*>(out));
  });
  return static_cast<int>(cudaGetLastError());
}

int LaunchMoeUnpermute(const void* expert_out, ActType type, int64_t hidden, const int32_t* ids,
                       const int32_t* row_of, const float* weights, int64_t n, int64_t k,
                       float* out, void* stream) {
  if (k < 1 || k > kMaxTopK) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  TANDEM_DISPATCH_ACT(type, T, {
    MoeUnpermuteKernel<<<static_cast<unsigned>(n), 256, 0, s>>>(
        static_cast<const T*>(expert_out), hidden, ids, row_of, weights, k, out);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
