// Linear layers on the CPU: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// Weights are held in the GEMM's compute dtype: bf16 where the CPU has
// AVX512-BF16 and the checkpoint is bf16, f32 otherwise (f32/f16 checkpoints
// and dequantized GGUF blocks), so f32 checkpoints compute exactly in f32.
// GEMMs run through oneDNN; Reference* functions are the plain loops every
// fast path is tested against.
// Decode-sized batches (up to 8 rows for f32 weights, 4 for bf16) take a
// kernel that streams the in-place weight once, since oneDNN 2.6 repacks an
// in-place [N, K] weight on every call; it multiplies f32 activations by the
// exactly widened weights. Larger bf16 batches round activations to bf16 and
// run on oneDNN's AVX512-BF16/AMX kernels (f32 accumulation either way).
#ifndef TANDEM_CPU_WORKER_OPS_LINEAR_H_
#define TANDEM_CPU_WORKER_OPS_LINEAR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace tandem::ops {

enum class ComputeType { kF32, kBF16 };

// True if the CPU can run bf16 GEMMs (AVX512-BF16, probed at run time).
bool CpuHasBf16();

class LinearWeight {
 public:
  // Builds from a checkpoint view of shape [N, K] (any stored dtype).
  // Uses the data in place where its dtype is the compute dtype; otherwise
  // converts once into an owned buffer. `prefer` is the caller's wish; bf16
  // is only used when the CPU supports it.
  static absl::StatusOr<LinearWeight> Create(const TensorView& w, ComputeType prefer);

  int64_t rows() const { return n_; }  // N, output features
  int64_t cols() const { return k_; }  // K, input features
  ComputeType compute_type() const { return type_; }
  const void* data() const { return data_; }  // [N, K] in compute dtype

 private:
  int64_t n_ = 0, k_ = 0;
  ComputeType type_ = ComputeType::kF32;
  const void* data_ = nullptr;
  std::shared_ptr<std::vector<uint8_t>> owned_;
};

// y[M, N] = x[M, K] · W^T + bias. `bias` may be null. Thread-safe; caches
// oneDNN primitives per shape.
void Linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y);

// Plain triple loop on an f32 weight [N, K], accumulating in double.
void ReferenceLinear(const float* x, int64_t m, const float* w, int64_t n, int64_t k,
                     const float* bias, float* y);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_LINEAR_H_
