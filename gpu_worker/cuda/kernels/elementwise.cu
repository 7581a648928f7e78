#include "gpu_worker/cuda/kernels/elementwise.h"

#include "gpu_worker/cuda/kernels/device_math.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return GridStrideBlocks(n, kThreads); }

template <typename Tin, typename Tout>
__global__ void EmbeddingKernel(const Tin* __restrict__ table, int64_t vocab, int64_t hidden,
                                const int32_t* __restrict__ ids, Tout* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const int32_t id = ids[r];
  Tout* o = out + r * hidden;
  if (id < 0 || id >= vocab) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = FromF32<Tout>(0.0f);
    return;
  }
  const Tin* row = table + static_cast<int64_t>(id) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = FromF32<Tout>(ToF32(row[i]));
}

// One block per row. The sum of squares in f32 (the host sums in double;
// the tests allow for it).
template <typename T>
__global__ void AddRmsNormKernel(float* __restrict__ residual, const T* __restrict__ delta,
                                 int64_t dim, const float* __restrict__ w, float eps,
                                 T* __restrict__ out) {
  __shared__ float scratch[32];
  float* x = residual + blockIdx.x * dim;
  const T* d = delta != nullptr ? delta + blockIdx.x * dim : nullptr;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = x[i];
    if (d != nullptr) {
      v += ToF32(d[i]);
      x[i] = v;
    }
    ss += v * v;
  }
  ss = BlockSum(ss, scratch);
  const float r = rsqrtf(ss / static_cast<float>(dim) + eps);
  T* o = out + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = FromF32<T>(w[i] * (x[i] * r));
}

// Grid (tokens, heads); threads over the pairs.
template <typename T>
__global__ void RopeKernel(T* __restrict__ x, int64_t heads, int64_t head_dim,
                           const int64_t* __restrict__ positions,
                           const float* __restrict__ inv_freq, int64_t half, bool interleaved) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  T* v = x + (t * heads + h) * head_dim;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const float a = ToF32(v[ia]), b = ToF32(v[ib]);
    v[ia] = FromF32<T>(a * c + (-b) * s);
    v[ib] = FromF32<T>(b * c + a * s);
  }
}

template <typename T>
__global__ void SwiGluKernel(const T* gate, const T* __restrict__ up, int64_t n, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = ToF32(gate[i]);
    out[i] = FromF32<T>(g / (1.0f + expf(-g)) * ToF32(up[i]));
  }
}

template <typename Tin, typename Tout>
__global__ void ConvertKernel(const Tin* __restrict__ in, Tout* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromF32<Tout>(ToF32(in[i]));
  }
}

int LastError() { return static_cast<int>(cudaGetLastError()); }

}  // namespace

int LaunchEmbedding(const void* table, ActType table_type, int64_t vocab, int64_t hidden,
                    const int32_t* ids, int64_t n, void* out, ActType out_type, void* stream) {
  if (n == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  TANDEM_DISPATCH_ACT(table_type, Tin, TANDEM_DISPATCH_ACT(out_type, Tout, {
    EmbeddingKernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(
        static_cast<const Tin*>(table), vocab, hidden, ids, static_cast<Tout*>(out));
  }));
  return LastError();
}

int LaunchAddRmsNorm(float* residual, const void* delta, int64_t rows, int64_t dim,
                     const float* w, float eps, void* out, ActType type, void* stream) {
  if (rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  TANDEM_DISPATCH_ACT(type, T, {
    AddRmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        residual, static_cast<const T*>(delta), dim, w, eps, static_cast<T*>(out));
  });
  return LastError();
}

int LaunchRope(void* x, ActType type, int64_t tokens, int64_t heads, int64_t head_dim,
               const int64_t* positions, const float* inv_freq, int64_t half, bool interleaved,
               void* stream) {
  if (tokens == 0 || heads == 0) return 0;
  // Rotated pairs past the head would write into the next head's (or
  // token's) values: ops::ApplyRope checks the same.
  if (half < 0 || 2 * half > head_dim) return static_cast<int>(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  const int threads = half >= 64 ? 64 : 32;
  TANDEM_DISPATCH_ACT(type, T, {
    RopeKernel<<<grid, threads, 0, s>>>(static_cast<T*>(x), heads, head_dim, positions, inv_freq,
                                        half, interleaved);
  });
  return LastError();
}

int LaunchSwiGlu(const void* gate, const void* up, int64_t n, void* out, ActType type,
                 void* stream) {
  if (n == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  TANDEM_DISPATCH_ACT(type, T, {
    SwiGluKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(gate),
                                                 static_cast<const T*>(up), n,
                                                 static_cast<T*>(out));
  });
  return LastError();
}

int LaunchConvert(const void* in, ActType in_type, void* out, ActType out_type, int64_t n,
                  void* stream) {
  if (n == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  TANDEM_DISPATCH_ACT(in_type, Tin, TANDEM_DISPATCH_ACT(out_type, Tout, {
    ConvertKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<const Tin*>(in),
                                                  static_cast<Tout*>(out), n);
  }));
  return LastError();
}

}  // namespace tandem::cuda
