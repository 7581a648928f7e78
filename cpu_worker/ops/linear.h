// Linear layers on the CPU: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// Weights are held in the GEMM's compute dtype: bf16 where the CPU has
// AVX512-BF16 and the checkpoint is bf16, f32 otherwise, so f32
// checkpoints compute exactly in f32. On AVX2 and AVX-512 CPUs without
// AVX512-BF16, bf16 checkpoints stay bf16 in place and compute in f32 on
// the exactly widened values (Bf16WidenedInPlace, widened_linear.h); f16
// checkpoints do the same on every CPU with AVX2 (F16WidenedInPlace), as
// no CPU GEMM here takes f16.
// GGUF block-quantized weights (Q8_0, Q4_0, Q4_1) stay quantized where they
// lie unless f32 compute is asked for (then they are dequantized once, and
// compute exactly as their dequantized values); the quantized kernels round
// the activations to int8 per block of 32 (quant_gemv.h). GEMMs run through
// oneDNN; Reference* functions are the plain loops every fast path is
// tested against.
// Where the caller lets them be copied (WeightLayout::kCpuPacked) and the
// CPU runs bf16 GEMMs without AMX (internal::Bf16PacksHere), bf16 weights
// are packed once at load into oneDNN's blocked layout
// (WeightStorage::kBF16Packed), with activations rounded to bf16. Its
// kernels stream that layout in address order and keep computing at their
// bf16 rate as rows grow: on the AMD EPYC VM (linear_bench.cc,
// BM_Bf16SmallBatchPaths path 6 against 0 and 4, cold 4096 x 4096 weights,
// 2 threads, read sweep 61 GB/s) 50 against 48 GB/s of weights at one row,
// 52 against 37 at 4 rows, 601 against 445 GFLOP/s at 16 and 778 against
// 425 at 32; in the engine, decode 1.19x faster at B = 1 and 1.35x at
// B = 16 (docs/PERFORMANCE.md). Batches of up to
// internal::kPackedBf16KernelMaxRows rows run on a kernel of our own over
// the same bytes (bf16_packed.h), which fetches the weight ahead in
// software and shares x's rounding and one parallel region among grouped
// calls (LinearGroup): on a Zen 4 EPYC VM dense decode B = 16 1.16x and
// MoE decode 1.09-1.21x as fast as on oneDNN's (docs/PERFORMANCE.md);
// larger ones (prefill) run on oneDNN's GEMM. AVX-512 CPUs without
// AVX512-BF16 pack too, and run every batch on that kernel with the
// weight widened to f32 in registers and x in f32 (compute type kF32). A row's result is the same
// bits whatever the batch within each of the two classes.
// The rest of this paragraph is about weights in place.
// Decode-sized batches (internal::SmallBatchMaxRows) take a kernel that
// streams the in-place weight once, since oneDNN 2.6 repacks an in-place
// [N, K] weight on every call; it multiplies f32 activations by the exactly
// widened weights. Where AMX is usable (amx_linear.h), bf16 batches of 2 to
// 32 rows with K a multiple of 32 take the AMX kernel instead, which also
// reads the weight in place (activations rounded to bf16; Bf16UsesAmxKernel
// says when); on AMD CPUs with AVX512-BF16, bf16 batches of 2 to 32 rows
// take an AVX512-BF16 dot-product kernel that does the same
// (bf16_dot_linear.h, Bf16UsesDotKernel). Larger bf16 batches round activations to bf16 and run on
// oneDNN's AVX512-BF16/AMX kernels (f32 accumulation either way): up to
// internal::kWeightAsSrcMaxRows rows on AMX with the weight as oneDNN's
// source operand (read in place), above that as a normal GEMM. Quantized
// batches above the int8 kernel's rows and up to 32 run on AMX where it is
// usable (QuantUsesAmxKernel: on int8 tiles), on the dot-product kernel on
// dequantized rows on AMD
// (QuantUsesDotKernel), else on dequantized panels for oneDNN.
//
// Batch invariance: a row's result is the same bits whatever else shares
// the call, on packed bf16 weights within 1-32 rows and within 33 and
// more (for every batch where the packed kernel widens), and, in place, for
// batches of up to SmallBatchMaxRows rows (4 with AMX, else
// 16; the small-batch kernel's accumulation order does not depend on m),
// within 2-32 rows on the AMX kernel and on the dot-product kernel (1 row
// alone is the small-batch kernel's), and on oneDNN's AMX within 5-16 and within 17-32 rows where
// the AMX kernel does not take the shape (one oneDNN primitive, of N = 16
// or 32, serves each class; tested, as oneDNN does not promise it).
// Across classes and above 32 rows, results differ by f32 summation order
// and, across the first boundary, by the bf16 rounding of the activations.
#ifndef TANDEM_CPU_WORKER_OPS_LINEAR_H_
#define TANDEM_CPU_WORKER_OPS_LINEAR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace tandem::ops {

// The caller's wish for how weights compute:
//   kF32        everything in f32 (quantized blocks dequantized once at load);
//   kBF16       bf16 weights in bf16 where the CPU has AVX512-BF16 (else
//               kept bf16 and widened where Bf16WidenedInPlace holds), f16
//               weights kept f16 and widened where F16WidenedInPlace holds,
//               the rest as kF32 (the default; a decode step gives a sequence
//               the same logits whoever it is batched with, within the
//               batch classes above);
//   kQuantized  as kBF16, and GGUF Q8_0/Q4_0/Q4_1 blocks computed in place
//               (int8 activations per 32-block on VNNI/AVX2 for up to a few
//               rows, or for all of them where PackedQuantTakesEveryBatch,
//               dequantized bf16 panels through the GEMM above): a
//               quarter of the bytes, but rows round differently on the two
//               paths, so a request's tokens can depend on its batch.
enum class ComputeType { kF32, kBF16, kQuantized };

// How a LinearWeight holds its [N, K] matrix.
enum class WeightStorage {
  kF32,
  kBF16,
  kBF16Packed,  // an owned copy in oneDNN's blocked layout (PackBf16 in onednn_matmul.h)
  kF16,         // in place, computed in f32 on the widened values
  kQ8_0,  // GGUF blocks (common/quant.h), rows of K / 32 blocks, in place
  kQ4_0,
  kQ4_1,
  // Owned copies of Q8_0, Q4_0 and Q4_1 blocks packed for the int8 kernel
  // (quant_packed.h).
  kQ8_0Packed,
  kQ4_0Packed,
  kQ4_1Packed,
};

// True if the CPU can run bf16 GEMMs (AVX512-BF16, probed at run time).
bool CpuHasBf16();

// Who reads a weight's bytes, and so which copies of them are allowed:
//   kInPlace    16-bit and quantized weights stay where they lie, row-major
//               (the default: the shared host weight store, whose bytes
//               the GPU worker reads too, and callers that read data());
//   kCpuPacked  only this process's CPU kernels read them: as kInPlace,
//               but bf16 weights computing in bf16 are packed into an owned
//               copy where internal::Bf16PacksHere holds, and Q8_0, Q4_0
//               and Q4_1 weights computed quantized where
//               internal::QuantPacksHere holds (the same bytes again,
//               which the mapping's clean pages can give back);
//   kForDevice  a device reads the row-major bytes and computes only f32
//               and bf16 weights (the CUDA device): as kInPlace, but f16
//               weights are converted to f32 at load.
enum class WeightLayout { kInPlace, kCpuPacked, kForDevice };

class LinearWeight {
 public:
  // Builds from a checkpoint view of shape [N, K] (any stored dtype).
  // Uses the data in place where its dtype is the compute dtype; otherwise
  // converts once into an owned buffer. `prefer` is the caller's wish; bf16
  // is only used when the CPU supports it. Q8_0/Q4_0/Q4_1 views are used in
  // place (storage() says which) unless `prefer` is kF32, which dequantizes
  // them to f32: exact f32 compute is what kF32 asks for. f16 views stay in
  // place (storage kF16, compute kF32) unless `prefer` is kF32, `layout` is
  // kForDevice or F16WidenedInPlace does not hold. bf16 views computing in
  // bf16 are packed (storage kBF16Packed) where `layout` is kCpuPacked and
  // Bf16PacksHere holds; so are Q8_0, Q4_0 and Q4_1 views computed
  // quantized (storage kQ8_0Packed, kQ4_0Packed, kQ4_1Packed) where
  // QuantPacksHere holds.
  static absl::StatusOr<LinearWeight> Create(const TensorView& w, ComputeType prefer,
                                             WeightLayout layout = WeightLayout::kInPlace);

  int64_t rows() const { return n_; }  // N, output features
  int64_t cols() const { return k_; }  // K, input features
  // kBF16 for bf16 storage (packed or not) on CPUs with bf16 GEMMs, else
  // kF32 (widened 16-bit and quantized weights accumulate in f32).
  ComputeType compute_type() const { return type_; }
  WeightStorage storage() const { return storage_; }
  bool quantized() const {
    return storage_ == WeightStorage::kQ8_0 || storage_ == WeightStorage::kQ4_0 ||
           storage_ == WeightStorage::kQ4_1 || packed_quant();
  }
  // Quantized blocks packed for the int8 kernel (kQ8_0Packed, kQ4_0Packed,
  // kQ4_1Packed).
  bool packed_quant() const {
    return storage_ == WeightStorage::kQ8_0Packed || storage_ == WeightStorage::kQ4_0Packed ||
           storage_ == WeightStorage::kQ4_1Packed;
  }
  // The GGUF block type of quantized storage (packed or in place).
  DType block_type() const;
  // [N, K] in storage(): f32, bf16 or f16 elements, GGUF blocks, packed
  // bf16 or packed quantized blocks. Only f32, bf16 and f16 storage may be
  // read as [N, K] elements, only kQ8_0/kQ4_0/kQ4_1 as rows of GGUF blocks.
  // (With packed storage, nbytes() counts the zero padding.)
  const void* data() const { return data_; }
  // Bytes of the matrix data() points at (what a pass over the weight reads).
  int64_t nbytes() const { return nbytes_; }

  // The same weight read from `data`: a copy of data()'s nbytes() bytes
  // elsewhere (a staging buffer the weight was streamed into). The caller
  // keeps those bytes alive and unchanged while the view is in use.
  LinearWeight WithData(const void* data) const {
    LinearWeight w = *this;
    w.data_ = data;
    w.owned_.reset();
    return w;
  }

 private:
  int64_t n_ = 0, k_ = 0;
  ComputeType type_ = ComputeType::kF32;
  WeightStorage storage_ = WeightStorage::kF32;
  int64_t nbytes_ = 0;
  const void* data_ = nullptr;
  std::shared_ptr<void> owned_;  // an owned copy data() points into
};

// y[M, N] = x[M, K] · W^T + bias. `bias` may be null. Thread-safe; caches
// oneDNN primitives per shape (bf16: with M rounded up to a few sizes per
// octave, OnednnRows). Quantized weights: decode-sized batches take the
// int8 kernels (weights packed at load on a VNNI CPU every batch, prefill
// included: PackedQuantTakesEveryBatch in quant_packed.h); larger ones up
// to 32 rows, where AMX is usable, the AMX
// kernel on int8 tiles (AmxQuantInt8Linear, activations quantized as the
// int8 kernels' are; a row's result does not depend on its batch within
// the rows it takes, 5-32), and the rest
// dequantized panels of the weight for oneDNN's GEMM (quant_gemv.h says
// where the switches lie).
void Linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y);

// One Linear call's operands, for LinearGroup.
struct LinearCall {
  const float* x;
  int64_t m;
  const LinearWeight* w;
  const float* bias;
  float* y;
};

// Each call as Linear runs it (the same bits). Where all of them are on
// packed quantized weights within the int8 kernel's rows, their rows share
// one parallel region and calls on the same x quantize it once
// (internal::PackedQuantLinearGroup); where all are on packed bf16 weights
// within the packed kernel's rows, the same with x rounded to bf16 once
// (internal::PackedBf16LinearGroup); otherwise they run one after another.
void LinearGroup(const LinearCall* calls, int64_t count);

namespace internal {
// The most rows Linear sends to the small-batch kernel (gemv.h) for
// weights computing in `t` (kF32 or kBF16); larger batches go to oneDNN.
int64_t SmallBatchMaxRows(ComputeType t);
// On AMX, bf16 batches above SmallBatchMaxRows and up to this many rows run
// oneDNN with the weight as its source operand, their rows rounded up to 16
// or 32 (onednn_matmul.h: OnednnMatmulWeightAsSrc).
inline constexpr int64_t kWeightAsSrcMaxRows = 32;
// True if a bf16 Linear of m rows and k input features runs on the AMX
// kernel (amx_linear.h).
bool Bf16UsesAmxKernel(int64_t m, int64_t k);
// True if a bf16 Linear of m rows runs on the AVX512-BF16 dot-product
// kernel (bf16_dot_linear.h): 2 to kBf16DotMaxRows rows on an AMD CPU with
// AVX512-BF16 and without AMX, where vdpbf16ps has twice the f32 FMA rate.
bool Bf16UsesDotKernel(int64_t m);
// True if bf16 weights stay bf16 where the CPU has no bf16 GEMMs, computed
// in f32 on the exactly widened values (else they are converted to f32 at
// load): where the small-batch kernel has an AVX-512 or AVX2 path for them.
bool Bf16WidenedInPlace();
// The same for f16 weights, on CPUs with or without bf16 GEMMs (no CPU GEMM
// here takes f16).
bool F16WidenedInPlace();
// True if bf16 weights are packed for oneDNN where the caller allows it
// (WeightLayout::kCpuPacked): on CPUs with bf16 GEMMs but without usable
// AMX (whose kernels, measured on Sapphire Rapids, read weights in place;
// the packed layout was measured on AMD EPYC only), and on AVX-512 CPUs
// without them, whose packed kernel widens the weights in registers for
// every batch (bf16_packed.h: PackedBf16Widens; on a Skylake-SP VM dense
// decode B = 16 ran 1.5-1.8x as fast as on the in-place kernels, prefill
// of 128 tokens 1.3-1.6x, docs/PERFORMANCE.md).
bool Bf16PacksHere();
// Packed bf16 batches that reach oneDNN (past kPackedBf16KernelMaxRows
// rows, or where the packed kernel does not run) of up to this many rows
// run on a primitive of their own size; larger ones, rounded up by
// OnednnRows (17-32 rows to 32), share one per few sizes, which keeps a MoE
// model's shapes within the primitive cache (kOnednnMatmulCacheLimit).
inline constexpr int64_t kPackedExactRows = 16;
// The most rows of such weights (bf16 or f16) the small-batch kernel
// takes; larger batches widen panels for oneDNN's f32 GEMM
// (widened_linear.h). Measured for bf16; on the
// AMD EPYC VM (4096 x 4096 cold, 2 threads, GFLOP/s, BM_Bf16SmallBatchPaths
// paths 0 and 5):
// with TANDEM_CPU_ISA=f32 (AVX-512) the kernel ran 282, 292 and 309 at 16,
// 32 and 48 rows against 164, 242 and 282 for the panels, and 302 against
// 332 at 64: 48. With TANDEM_CPU_ISA=avx2 (oneDNN capped at AVX2 too),
// 145-150, 131-137, 127-133, 146-153 and 154-159 at 4, 6, 8, 12 and 16
// rows against 53-59, 75-86, 91-93, 116-120 and 141-142 for the panels,
// and 104-138 against 142-208 at 24-48: 16.
int64_t WidenedSmallBatchMaxRows();
// True if a quantized Linear of m rows and k input features runs on an
// AMX kernel: the batches above the int8 kernel's (QuantLinearUsesGemv) up
// to kAmxMaxRows rows, where AMX is usable. They take the int8 tiles
// (AmxQuantInt8Linear) where AMX-INT8 is usable (QuantUsesAmxInt8Kernel),
// else the kernel on rows dequantized to bf16 (AmxQuantLinear). Measured
// with BM_QuantSmallBatchPaths (4096 x 4096, cold, 2 threads, the AMX VM;
// W_GB/s of blocks, int8 tiles against dequantized rows): Q8_0 19.9-20.8
// against 13.8-15.7 at 4-16 rows, 13.5-16.6 against 11.0-14.5 at 24-32;
// Q4_0 9.0-10.0 against 6.9-7.4 at 8-16, 6.8-7.4 against 6.3-6.6 at 32.
bool QuantUsesAmxKernel(int64_t m, int64_t k);
bool QuantUsesAmxInt8Kernel(int64_t m, int64_t k);
// True if a quantized Linear of m rows runs on the dot-product kernel on
// dequantized rows (QuantDotLinear): the batches above the int8 kernel's up
// to kBf16DotMaxRows where Bf16UsesDotKernel holds (AMD without AMX).
bool QuantUsesDotKernel(int64_t m);
// The rows a bf16 oneDNN GEMM of m rows runs with: m rounded up to a
// multiple of max(16, 2^floor(log2 m) / 8), so that prefill and MoE expert
// batches of every size share a few primitives per octave (creating one
// takes about as long as running it) at most 1/8 extra rows; AMX computes
// 16-row tiles, so rounding up to 16 costs it nothing.
int64_t OnednnRows(int64_t m);
}  // namespace internal

// Plain triple loop on an f32 weight [N, K], accumulating in double.
void ReferenceLinear(const float* x, int64_t m, const float* w, int64_t n, int64_t k,
                     const float* bias, float* y);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_LINEAR_H_
