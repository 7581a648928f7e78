// Normalisation, activation and embedding ops on f32 activations.
#ifndef TANDEM_CPU_WORKER_OPS_ELEMENTWISE_H_
#define TANDEM_CPU_WORKER_OPS_ELEMENTWISE_H_

#include <cstdint>

#include "common/tensor.h"

namespace tandem::ops {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w  for r < rows.
// `w` is an f32 array of `dim` elements. In-place (out == x) is allowed.
void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
             float* out);

// out[i] = silu(gate[i]) * up[i] for i < n. In-place (out == gate) allowed.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// Copies rows `ids[i]` of an embedding table [vocab, dim] of any stored dtype
// into out[i, :] as f32.
void EmbeddingLookup(const TensorView& table, const int32_t* ids, int64_t n, float* out);

// y[i] += x[i] * scale
void AddScaled(const float* x, float scale, int64_t n, float* y);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_ELEMENTWISE_H_
