#include "gpu_worker/cuda/kernels/prefill_attention.h"

#include <cfloat>

#include "gpu_worker/cuda/kernels/device_math.cuh"

namespace tandem::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // query rows per block: one warp each
constexpr int kKeyTile = 16;      // keys staged in shared memory at a time
constexpr int kPerLane = kMaxPrefillHeadDim / 32;

template <typename T>
__global__ void WriteKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                              int64_t row, const int64_t* __restrict__ slots, T* __restrict__ kc,
                              T* __restrict__ vc) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kc[slot * row + i] = FromF32<T>(k[t * row + i]);
    vc[slot * row + i] = FromF32<T>(v[t * row + i]);
  }
}

// Grid (chunk, head, query tile). Warp w takes query row tile * 8 + w of
// the chunk; its lanes hold dims lane, lane + 32, ... of q and of the
// accumulator. The block walks key tiles up to its last row's position;
// all threads stage each tile (K and V as f32) in shared memory, then each
// warp scores the tile's keys that its row may see.
template <typename T>
__global__ void PrefillKernel(const float* __restrict__ q, const T* __restrict__ kc,
                              const T* __restrict__ vc, int64_t block_size, int64_t kv_heads,
                              int64_t head_dim, int64_t heads,
                              const int32_t* __restrict__ tables, int64_t max_blocks,
                              const int32_t* __restrict__ q_start,
                              const int32_t* __restrict__ q_len,
                              const int32_t* __restrict__ start_pos, float scale,
                              float* __restrict__ out) {
  extern __shared__ float tile[];  // [2][kKeyTile][head_dim]: K then V
  float* tk = tile;
  float* tv = tile + kKeyTile * head_dim;
  const int64_t c = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t len = q_len[c];
  const int64_t first_row = static_cast<int64_t>(blockIdx.z) * kRowsPerBlock;
  if (first_row >= len) return;  // the whole block: uniform
  const int64_t i = first_row + warp;  // this warp's query within the chunk
  const bool active = i < len;
  const int64_t pos0 = start_pos[c];
  const int64_t my_pos = pos0 + i;  // its position: keys 0 .. my_pos
  const int64_t last_pos = pos0 + min(len, first_row + kRowsPerBlock) - 1;
  const int64_t kvh = h / (heads / kv_heads);
  const int32_t* table = tables + c * max_blocks;
  const int64_t row = q_start[c] + i;

  float qv[kPerLane], acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    qv[j] = active && d < head_dim ? q[(row * heads + h) * head_dim + d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int64_t t0 = 0; t0 <= last_pos; t0 += kKeyTile) {
    const int64_t n = min(static_cast<int64_t>(kKeyTile), last_pos + 1 - t0);
    __syncthreads();  // the previous tile is no longer read
    for (int64_t e = threadIdx.x; e < n * head_dim; e += blockDim.x) {
      const int64_t kt = e / head_dim, d = e % head_dim;
      const int64_t p = t0 + kt;
      const int64_t slot = static_cast<int64_t>(table[p / block_size]) * block_size + p % block_size;
      tk[kt * head_dim + d] = ToF32(kc[(slot * kv_heads + kvh) * head_dim + d]);
      tv[kt * head_dim + d] = ToF32(vc[(slot * kv_heads + kvh) * head_dim + d]);
    }
    __syncthreads();
    if (!active) continue;
    for (int64_t kt = 0; kt < n && t0 + kt <= my_pos; ++kt) {
      float dot = 0.0f;
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < head_dim) dot += qv[j] * tk[kt * head_dim + d];
      }
      const float score = WarpSum(dot) * scale;
      const float m_new = fmaxf(m, score);
      const float correction = expf(m - m_new);
      const float p = expf(score - m_new);
      l = l * correction + p;
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t d = lane + 32 * j;
        acc[j] = acc[j] * correction + (d < head_dim ? p * tv[kt * head_dim + d] : 0.0f);
      }
      m = m_new;
    }
  }
  if (!active) return;
  float* o = out + (row * heads + h) * head_dim;
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < head_dim) o[d] = acc[j] / l;  // l >= 1: the row sees at least itself
  }
}

}  // namespace

int LaunchWriteKv(const float* k, const float* v, int64_t tokens, int64_t kv_heads,
                  int64_t head_dim, const int64_t* slots, void* k_cache, void* v_cache,
                  ActType kv_type, void* stream) {
  if (tokens == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  TANDEM_DISPATCH_ACT(kv_type, T, {
    WriteKvKernel<<<static_cast<unsigned>(tokens), 256, 0, s>>>(
        k, v, kv_heads * head_dim, slots, static_cast<T*>(k_cache), static_cast<T*>(v_cache));
  });
  return static_cast<int>(cudaGetLastError());
}

int LaunchPrefillAttention(const float* q, const void* k_cache, const void* v_cache,
                           ActType kv_type, int64_t block_size, int64_t kv_heads,
                           int64_t head_dim, int64_t heads, const int32_t* block_tables,
                           int64_t max_blocks, const int32_t* q_start, const int32_t* q_len,
                           const int32_t* start_pos, int64_t chunks, int64_t max_q_len,
                           float scale, float* out, void* stream) {
  if (head_dim < 1 || head_dim > kMaxPrefillHeadDim || kv_heads < 1 || heads % kv_heads != 0 ||
      block_size < 1 || max_q_len < 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (chunks == 0 || max_q_len == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(heads),
                  static_cast<unsigned>((max_q_len + kRowsPerBlock - 1) / kRowsPerBlock));
  const size_t shared = 2 * kKeyTile * static_cast<size_t>(head_dim) * sizeof(float);
  TANDEM_DISPATCH_ACT(kv_type, T, {
    PrefillKernel<<<grid, 32 * kRowsPerBlock, shared, s>>>(
        q, static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), block_size, kv_heads,
        head_dim, heads, block_tables, max_blocks, q_start, q_len, start_pos, scale, out);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tandem::cuda
