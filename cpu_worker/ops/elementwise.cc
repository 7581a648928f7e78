#include "cpu_worker/ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "common/quant.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/vec_math.h"

namespace tandem::ops {
namespace {

// Below this many elements an op runs on one thread.
constexpr int64_t kParallelElems = 1 << 15;

__attribute__((target_clones("avx512f", "avx2", "default"))) void RmsNormRow(
    const float* x, int64_t dim, const float* w, float eps, float* out) {
  // As HF LlamaRMSNorm in f32: the squares are f32, their mean is summed in
  // double here (torch's f32 cascade sum is about as exact).
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < dim; ++i) {
    const float sq = x[i] * x[i];
    sum += static_cast<double>(sq);
  }
  const float mean = static_cast<float>(sum / static_cast<double>(dim));
  const float r = 1.0f / std::sqrt(mean + eps);
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) out[i] = w[i] * (x[i] * r);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void SwiGluRange(const float* gate,
                                                                              const float* up,
                                                                              int64_t n,
                                                                              float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + internal::ExpApprox(-g)) * up[i];
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void AddScaledRange(const float* x,
                                                                                 float scale,
                                                                                 int64_t n,
                                                                                 float* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += x[i] * scale;
}

// Runs fn(begin, len) over [0, n) in chunks, in parallel when n is large.
template <typename Fn>
void ForChunks(int64_t n, Fn fn) {
  constexpr int64_t kChunk = 1 << 13;
  if (n <= kParallelElems) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    fn(begin, std::min(kChunk, n - begin));
  }
}

}  // namespace

void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* out) {
  TANDEM_CHECK(rows >= 0 && dim > 0);
#pragma omp parallel for schedule(static) if (rows * dim > kParallelElems && rows > 1)
  for (int64_t r = 0; r < rows; ++r) RmsNormRow(x + r * dim, dim, w, eps, out + r * dim);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  TANDEM_CHECK(n >= 0);
  ForChunks(n, [&](int64_t begin, int64_t len) {
    SwiGluRange(gate + begin, up + begin, len, out + begin);
  });
}

void EmbeddingLookup(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  TANDEM_CHECK(table.rank() == 2);
  const int64_t vocab = table.dim(0), dim = table.dim(1);
  TANDEM_CHECK(dim % DTypeBlockElems(table.dtype) == 0);
  const int64_t row_bytes = DTypeBytes(table.dtype, dim).value();
  const auto* base = static_cast<const uint8_t*>(table.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    TANDEM_CHECK(id >= 0 && id < vocab);
    ConvertToF32(table.dtype, base + id * row_bytes, dim, out + i * dim);
  }
}

void AddScaled(const float* x, float scale, int64_t n, float* y) {
  TANDEM_CHECK(n >= 0);
  ForChunks(n,
            [&](int64_t begin, int64_t len) { AddScaledRange(x + begin, scale, len, y + begin); });
}

}  // namespace tandem::ops
