#include "gpu_worker/cuda/kernels/decode_attention.h"

#include <cfloat>

#include "gpu_worker/cuda/kernels/device_math.cuh"

namespace tandem::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kPerLane = kMaxDecodeHeadDim / 32;  // values of a head each lane holds

// Block per (sequence, query head). Each warp walks keys w, w + kWarps, ...:
// its 32 lanes split the head's dims (lane holds dims lane, lane + 32, ...),
// a shuffle reduction gives the score, and the warp keeps its own running
// max m, sum l and output accumulator (flash-decoding within the block).
// The warps' states are then merged through shared memory.
template <typename T>
__global__ void PagedDecodeKernel(const float* __restrict__ q, const T* __restrict__ kc,
                                  const T* __restrict__ vc, int64_t block_size, int64_t kv_heads,
                                  int64_t head_dim, int64_t heads,
                                  const int32_t* __restrict__ tables, int64_t max_blocks,
                                  const int32_t* __restrict__ lens, float scale,
                                  float* __restrict__ out) {
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t kvh = h / (heads / kv_heads);
  const int64_t len = lens[s];
  const float* qh = q + (s * heads + h) * head_dim;
  float* oh = out + (s * heads + h) * head_dim;

  float qv[kPerLane], acc[kPerLane];
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qv[i] = d < head_dim ? qh[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  const int32_t* table = tables + s * max_blocks;
  for (int64_t t = warp; t < len; t += kWarps) {
    const int64_t slot = static_cast<int64_t>(table[t / block_size]) * block_size + t % block_size;
    const T* kr = kc + (slot * kv_heads + kvh) * head_dim;
    const T* vr = vc + (slot * kv_heads + kvh) * head_dim;
    float dot = 0.0f;
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < head_dim) dot += qv[i] * ToF32(kr[d]);
    }
    const float score = WarpSum(dot) * scale;
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new);  // 0 on the first key (m = -FLT_MAX)
    const float p = expf(score - m_new);
    l = l * correction + p;
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      acc[i] = acc[i] * correction + (d < head_dim ? p * ToF32(vr[d]) : 0.0f);
    }
    m = m_new;
  }

  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float sacc[kWarps][kMaxDecodeHeadDim];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < head_dim) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  float gm = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) {
    if (sl[w] > 0.0f) gm = fmaxf(gm, sm[w]);
  }
  float gl = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (sl[w] > 0.0f) gl += sl[w] * expf(sm[w] - gm);
  }
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (sl[w] > 0.0f) o += sacc[w][d] * expf(sm[w] - gm);
    }
    oh[d] = gl > 0.0f ? o / gl : 0.0f;
  }
}

}  // namespace

int LaunchPagedDecodeAttention(const float* q, const void* k_cache, const void* v_cache,
                               ActType kv_type, int64_t block_size, int64_t kv_heads,
                               int64_t head_dim, int64_t heads, const int32_t* block_tables,
                               int64_t max_blocks, const int32_t* context_lens, int64_t seqs,
                               float scale, float* out, void* stream) {
  if (head_dim < 1 || head_dim > kMaxDecodeHeadDim || kv_heads < 1 || heads % kv_heads != 0 ||
      block_size < 1) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (seqs == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(seqs), static_cast<unsigned>(heads));
  TANDEM_DISPATCH_ACT(kv_type, T, {
    PagedDecodeKernel<<<grid, 32 * kWarps, 0, s>>>(
        q, static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), block_size, kv_heads,
        head_dim, heads, block_tables, max_blocks, context_lens, scale, out);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
