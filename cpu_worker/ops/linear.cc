#include "cpu_worker/ops/linear.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/amx_linear.h"
#include "cpu_worker/ops/bf16_dot_linear.h"
#include "cpu_worker/ops/bf16_packed.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/gemv.h"
#include "cpu_worker/ops/onednn_matmul.h"
#include "cpu_worker/ops/quant_gemv.h"
#include "cpu_worker/ops/quant_packed.h"
#include "cpu_worker/ops/widened_linear.h"

namespace tandem::ops {
namespace {

// Below this many elements a conversion runs on one thread.
constexpr int64_t kParallelElems = 1 << 16;

// f32 -> bf16, round to nearest even, NaN kept quiet: the same result as
// F32ToBf16 but branch-free so that it vectorises.
__attribute__((target_clones("avx512f", "avx2", "default"))) void F32ToBf16Range(const float* src,
                                                                                 int64_t n,
                                                                                 uint16_t* dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(src[i]);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

void ConvertToBf16(const float* src, int64_t n, uint16_t* dst) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    const int64_t len = std::min(kChunk, n - begin);
    F32ToBf16Range(src + begin, len, dst + begin);
  }
}

// Converts an [n, k] matrix of any stored dtype to f32, row by row.
void ConvertRowsToF32(DType t, const void* src, int64_t n, int64_t k, float* dst) {
  const int64_t row_bytes = DTypeBytes(t, k).value();
  const auto* base = static_cast<const uint8_t*>(src);
#pragma omp parallel for schedule(static) if (n * k > kParallelElems)
  for (int64_t r = 0; r < n; ++r) {
    ConvertToF32(t, base + r * row_bytes, k, dst + r * k);
  }
}

// x [m, k] rounded to bf16 in a thread-local buffer of `rows` >= m rows,
// the rows past m zero: a GEMM primitive of `rows` rows pads x so.
const uint16_t* RowsToBf16(const float* x, int64_t m, int64_t rows, int64_t k) {
  thread_local std::vector<uint16_t> xb;
  if (static_cast<int64_t>(xb.size()) < rows * k) xb.resize(static_cast<size_t>(rows * k));
  ConvertToBf16(x, m * k, xb.data());
  std::fill(xb.begin() + m * k, xb.begin() + rows * k, uint16_t{0});
  return xb.data();
}

// Where a GEMM of `rows` >= m rows writes its [rows, n] output: y itself
// when rows == m, else a thread-local buffer whose first m rows the caller
// copies to y (the padding rows' outputs are dropped).
float* OutputRows(float* y, int64_t m, int64_t rows, int64_t n) {
  if (rows == m) return y;
  thread_local std::vector<float> yb;
  if (static_cast<int64_t>(yb.size()) < rows * n) yb.resize(static_cast<size_t>(rows * n));
  return yb.data();
}

// Zeroes `bytes` at `p` in 2 MiB pieces shared among the threads.
void ZeroInParallel(void* p, int64_t bytes) {
  constexpr int64_t kPiece = int64_t{2} << 20;
  auto* base = static_cast<uint8_t*>(p);
  const int64_t pieces = (bytes + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t i = 0; i < pieces; ++i) {
    std::memset(base + i * kPiece, 0, static_cast<size_t>(std::min(kPiece, bytes - i * kPiece)));
  }
}

// An owned weight buffer of `bytes`: 64-byte aligned, and from 2 MiB on
// placed on 2 MiB boundaries and advised onto huge pages, as the engine's
// checkpoint mappings are (a pass over a weight then walks few TLB entries).
std::shared_ptr<void> AllocateWeight(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  TANDEM_CHECK(p != nullptr && "out of memory for a weight copy");
  if (align == kHuge) madvise(p, bytes, MADV_HUGEPAGE);
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace

absl::StatusOr<LinearWeight> LinearWeight::Create(const TensorView& w, ComputeType prefer,
                                                  WeightLayout layout) {
  if (w.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear weight '", w.name, "' must be 2-D, got shape ", ShapeString(w.shape)));
  }
  const int64_t n = w.dim(0), k = w.dim(1);
  if (n <= 0 || k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear weight '", w.name, "' has an empty shape ", ShapeString(w.shape)));
  }
  if (w.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("linear weight '", w.name, "' has no data"));
  }
  if (w.dtype == DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear weight '", w.name, "' has unsupported dtype ", std::string(DTypeName(w.dtype))));
  }
  if (k % DTypeBlockElems(w.dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("linear weight '", w.name, "' of dtype ",
                                                   std::string(DTypeName(w.dtype)), ": row length ",
                                                   k, " is not a whole number of blocks"));
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t bytes, DTypeBytes(w.dtype, n * k));
  if (w.nbytes != 0 && w.nbytes < bytes) {
    return absl::InvalidArgumentError(absl::StrCat("linear weight '", w.name, "' of shape ",
                                                   ShapeString(w.shape), " needs ", bytes,
                                                   " bytes, view has ", w.nbytes));
  }

  LinearWeight lw;
  lw.n_ = n;
  lw.k_ = k;
  lw.nbytes_ = bytes;
  if (w.dtype == DType::kF32) {
    lw.type_ = ComputeType::kF32;
    lw.storage_ = WeightStorage::kF32;
    lw.data_ = w.data;
  } else if (w.dtype == DType::kBF16 && prefer != ComputeType::kF32 &&
             layout == WeightLayout::kCpuPacked && internal::Bf16PacksHere()) {
    // Packed once for oneDNN (onednn_matmul.h: PackBf16), which then runs
    // every batch size. Zeroed first, on all threads: that zeroes the
    // padding of partial blocks and faults the fresh pages in faster than
    // the reorder does (on the AMD EPYC VM, a stand-alone 0.92 GB packed in
    // 0.31 s so and in 1.33 s without; in the engine, where fresh pages
    // fault in slower, the gain is within the noise of the load time).
    lw.type_ = internal::PackedBf16Widens() ? ComputeType::kF32 : ComputeType::kBF16;
    lw.storage_ = WeightStorage::kBF16Packed;
    lw.nbytes_ = internal::PackedBf16Bytes(n, k);
    lw.owned_ = AllocateWeight(static_cast<size_t>(lw.nbytes_));
    ZeroInParallel(lw.owned_.get(), lw.nbytes_);
    internal::PackBf16(static_cast<const uint16_t*>(w.data), n, k, lw.owned_.get());
    lw.data_ = lw.owned_.get();
  } else if (w.dtype == DType::kBF16 && prefer != ComputeType::kF32 &&
             (CpuHasBf16() || internal::Bf16WidenedInPlace())) {
    // In place. Without bf16 GEMMs it computes in f32 on the exactly
    // widened values (widened_linear.h): the f32 result at half the bytes.
    lw.type_ = CpuHasBf16() ? ComputeType::kBF16 : ComputeType::kF32;
    lw.storage_ = WeightStorage::kBF16;
    lw.data_ = w.data;
  } else if (w.dtype == DType::kF16 && prefer != ComputeType::kF32 &&
             layout != WeightLayout::kForDevice && internal::F16WidenedInPlace()) {
    // In place, widened exactly where used: the f32 result at half the bytes.
    lw.type_ = ComputeType::kF32;
    lw.storage_ = WeightStorage::kF16;
    lw.data_ = w.data;
  } else if (DTypeIsQuantized(w.dtype) && prefer == ComputeType::kQuantized &&
             layout == WeightLayout::kCpuPacked && internal::QuantPacksHere()) {
    // Repacked once for the int8 kernel (quant_packed.h): the same bytes,
    // interleaved so that 16 blocks' dot products take eight instructions.
    lw.type_ = ComputeType::kF32;
    lw.storage_ = w.dtype == DType::kQ8_0   ? WeightStorage::kQ8_0Packed
                  : w.dtype == DType::kQ4_0 ? WeightStorage::kQ4_0Packed
                                            : WeightStorage::kQ4_1Packed;
    lw.nbytes_ = internal::PackedQuantBytes(w.dtype, n, k);
    lw.owned_ = AllocateWeight(static_cast<size_t>(lw.nbytes_));
    internal::PackQuant(w.dtype, w.data, n, k, lw.owned_.get());
    lw.data_ = lw.owned_.get();
  } else if (DTypeIsQuantized(w.dtype) && prefer == ComputeType::kQuantized) {
    // Computed on the blocks in place (the int8 kernels run on any CPU).
    lw.type_ = ComputeType::kF32;
    lw.storage_ = w.dtype == DType::kQ8_0   ? WeightStorage::kQ8_0
                  : w.dtype == DType::kQ4_0 ? WeightStorage::kQ4_0
                                            : WeightStorage::kQ4_1;
    lw.data_ = w.data;
  } else {
    // f16 and bf16 where no kernel here widens them (or f32 compute or an
    // f32 copy is asked for), and the GGUF block types when f32 compute is
    // asked for: converted to f32 once.
    lw.type_ = ComputeType::kF32;
    lw.storage_ = WeightStorage::kF32;
    lw.nbytes_ = n * k * 4;
    lw.owned_ = AllocateWeight(static_cast<size_t>(n * k) * 4);
    ConvertRowsToF32(w.dtype, w.data, n, k, static_cast<float*>(lw.owned_.get()));
    lw.data_ = lw.owned_.get();
  }
  return lw;
}

DType LinearWeight::block_type() const {
  switch (storage_) {
    case WeightStorage::kQ8_0:
    case WeightStorage::kQ8_0Packed:
      return DType::kQ8_0;
    case WeightStorage::kQ4_0:
    case WeightStorage::kQ4_0Packed:
      return DType::kQ4_0;
    case WeightStorage::kQ4_1:
    case WeightStorage::kQ4_1Packed:
      return DType::kQ4_1;
    default:
      TANDEM_CHECK(false && "block_type() of a weight that is not quantized");
      return DType::kF32;
  }
}

namespace {

// True if the calls can run as one PackedBf16LinearGroup: all on packed
// bf16 weights, with batches the kernel takes (decode-sized ones, or any
// where it widens).
bool PackedBf16Group(const LinearCall* calls, int64_t count) {
  if (!internal::PackedBf16KernelHere()) return false;
  const bool any_rows = internal::PackedBf16Widens();
  for (int64_t c = 0; c < count; ++c) {
    if (calls[c].w->storage() != WeightStorage::kBF16Packed ||
        (calls[c].m > internal::kPackedBf16KernelMaxRows && !any_rows)) {
      return false;
    }
  }
  return true;
}

}  // namespace

void LinearGroup(const LinearCall* calls, int64_t count) {
  if (count > 0 && PackedBf16Group(calls, count)) {
    thread_local std::vector<internal::PackedBf16Call> group;
    group.clear();
    for (int64_t c = 0; c < count; ++c) {
      const LinearCall& l = calls[c];
      TANDEM_CHECK(l.w->data() != nullptr && l.m >= 0);
      group.push_back({l.x, l.m, l.w->data(), l.w->rows(), l.w->cols(), l.bias, l.y});
    }
    internal::PackedBf16LinearGroup(group.data(), count);
    return;
  }
  bool packed = true;
  for (int64_t c = 0; c < count && packed; ++c) {
    packed = calls[c].w->packed_quant() && calls[c].m <= internal::kPackedQuantMaxRows;
  }
  if (!packed) {
    for (int64_t c = 0; c < count; ++c) {
      Linear(calls[c].x, calls[c].m, *calls[c].w, calls[c].bias, calls[c].y);
    }
    return;
  }
  thread_local std::vector<internal::PackedQuantCall> group;
  group.clear();
  for (int64_t c = 0; c < count; ++c) {
    const LinearCall& l = calls[c];
    TANDEM_CHECK(l.w->data() != nullptr && l.m >= 0);
    group.push_back(
        {l.w->block_type(), l.x, l.m, l.w->data(), l.w->rows(), l.w->cols(), l.bias, l.y});
  }
  internal::PackedQuantLinearGroup(group.data(), count);
}

void Linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y) {
  TANDEM_CHECK(w.data() != nullptr);
  TANDEM_CHECK(m >= 0);
  if (m == 0) return;
  if (w.packed_quant()) {
    if (m <= internal::kPackedQuantMaxRows || internal::PackedQuantTakesEveryBatch()) {
      internal::PackedQuantLinear(w.block_type(), x, m, w.data(), w.rows(), w.cols(), bias, y);
    } else {
      internal::QuantLinearViaGemm(x, m, w.data(), w.block_type(), w.rows(), w.cols(), bias, y,
                                   /*panel_rows=*/0, /*packed=*/true);
    }
    return;
  }
  if (w.quantized()) {
    const DType t = w.block_type();
    if (internal::QuantLinearUsesGemv(m)) {
      internal::QuantLinear(x, m, w.data(), t, w.rows(), w.cols(), bias, y, MaxKernelIsa());
    } else if (internal::QuantUsesAmxInt8Kernel(m, w.cols())) {
      internal::AmxQuantInt8Linear(x, m, w.data(), t, w.rows(), w.cols(), bias, y);
    } else if (internal::QuantUsesAmxKernel(m, w.cols())) {
      internal::AmxQuantLinear(x, m, w.data(), t, w.rows(), w.cols(), bias, y);
    } else if (internal::QuantUsesDotKernel(m)) {
      internal::QuantDotLinear(x, m, w.data(), t, w.rows(), w.cols(), bias, y);
    } else {
      internal::QuantLinearViaGemm(x, m, w.data(), t, w.rows(), w.cols(), bias, y);
    }
    return;
  }
  if (w.storage() == WeightStorage::kBF16Packed) {
    if (internal::PackedBf16Widens() ||
        (m <= internal::kPackedBf16KernelMaxRows && internal::PackedBf16KernelHere())) {
      internal::PackedBf16Linear(x, m, w.data(), w.rows(), w.cols(), bias, y);
      return;
    }
    // Decode batches run at their own size (the result of a row does not
    // depend on it); larger ones share a few primitives per octave.
    const int64_t rows = m <= internal::kPackedExactRows ? m : internal::OnednnRows(m);
    float* out = OutputRows(y, m, rows, w.rows());
    internal::OnednnMatmulPacked(RowsToBf16(x, m, rows, w.cols()), rows, w.data(), w.rows(),
                                 w.cols(), bias, out);
    if (out != y) std::copy_n(out, m * w.rows(), y);
    return;
  }
  const bool bf16 = w.compute_type() == ComputeType::kBF16;
  if (bf16 && internal::Bf16UsesAmxKernel(m, w.cols())) {
    internal::AmxLinear(x, m, static_cast<const uint16_t*>(w.data()), w.rows(), w.cols(), bias, y);
    return;
  }
  if (bf16 && internal::Bf16UsesDotKernel(m)) {
    internal::Bf16DotLinear(x, m, static_cast<const uint16_t*>(w.data()), w.rows(), w.cols(), bias,
                            y);
    return;
  }
  if ((w.storage() == WeightStorage::kBF16 && !bf16) || w.storage() == WeightStorage::kF16) {
    // 16-bit weights computed in f32: widened in the small-batch kernel's
    // registers, or in panels for the f32 GEMM.
    const auto* wh = static_cast<const uint16_t*>(w.data());
    const internal::GemvWeight wt = w.storage() == WeightStorage::kF16
                                        ? internal::GemvWeight::kF16
                                        : internal::GemvWeight::kBF16;
    if (m <= internal::WidenedSmallBatchMaxRows()) {
      internal::SmallBatchLinear(x, m, wh, wt, w.rows(), w.cols(), bias, y);
    } else {
      internal::WidenedLinear(x, m, wh, wt, w.rows(), w.cols(), bias, y);
    }
    return;
  }
  if (m <= internal::SmallBatchMaxRows(w.compute_type())) {
    // Decode-sized batches: stream the in-place weight once (oneDNN would
    // repack it on every call).
    internal::SmallBatchLinear(x, m, w.data(),
                               bf16 ? internal::GemvWeight::kBF16 : internal::GemvWeight::kF32,
                               w.rows(), w.cols(), bias, y);
    return;
  }
  if (w.compute_type() == ComputeType::kF32) {
    internal::OnednnMatmul(x, m, w.data(), w.rows(), w.cols(), bias, internal::MatmulType::kF32, y);
    return;
  }
  // x in bf16, zero rows up to the primitive's size.
  const bool weight_as_src = m <= internal::kWeightAsSrcMaxRows && internal::OnednnBf16UsesAmx();
  const int64_t rows = weight_as_src ? (m + 15) / 16 * 16 : internal::OnednnRows(m);
  const uint16_t* xb = RowsToBf16(x, m, rows, w.cols());
  if (weight_as_src) {
    internal::OnednnMatmulWeightAsSrc(xb, m, rows, static_cast<const uint16_t*>(w.data()),
                                      w.rows(), w.cols(), bias, y);
    return;
  }
  float* out = OutputRows(y, m, rows, w.rows());
  internal::OnednnMatmul(xb, rows, w.data(), w.rows(), w.cols(), bias,
                         internal::MatmulType::kBF16, out);
  if (out != y) std::copy_n(out, m * w.rows(), y);
}

namespace internal {

// Measured on the 2-core Sapphire Rapids VM (cold weights of the dense
// synthetic model's layers, fastest call of several; linear_bench.cc has a
// side-by-side): with AMX, oneDNN with the weight as source operand (x
// padded to 16 rows) ties the small-batch kernel at 4 rows and is 1.25x
// faster at 8 (the kernel is compute-bound from there: f32 FMAs against
// AMX tiles), 2x at 16; the kernel stays 1.2x faster at 1 row. Without AMX,
// oneDNN's AVX512-BF16 dot products run at half the FMA rate and the
// kernel wins up to 16 rows. f32 weights break even near 8-10 rows.
int64_t SmallBatchMaxRows(ComputeType t) {
  if (t != ComputeType::kBF16) return 8;
  return OnednnBf16UsesAmx() ? 4 : 16;
}

// Measured the same way (linear_bench.cc, BM_Bf16SmallBatchPaths, 4096 x
// 4096 cold weights, 2 threads): the AMX kernel reads 20-25 GB/s of weights
// at 2-16 rows and 16 GB/s at 32, against 13-14 and 12 for oneDNN with the
// weight as source and 19-22 for the small-batch kernel at 2-4 rows; the
// small-batch kernel stays faster at 1 row (27 against 21-25 GB/s), which
// is also the one size where it keeps the activations in f32.
bool Bf16UsesAmxKernel(int64_t m, int64_t k) {
  return m >= 2 && AmxLinearFits(m, k) && AmxUsable();
}

// Measured on the 2-core AMD EPYC VM (BM_Bf16SmallBatchPaths, 4096 x 4096
// cold weights, 2 threads, GFLOP/s): the dot-product kernel 120, 149, 216
// and 247 at 4, 8, 16 and 32 rows against 78, 110, 130 and 145 for the
// small-batch kernel and 213 for oneDNN at 32; they tie at 2 rows, and
// 1 row keeps its f32 activations on the small-batch kernel.
bool Bf16UsesDotKernel(int64_t m) {
  static const bool amd = HostCpuFeatures().amd;
  return m >= 2 && m <= kBf16DotMaxRows && amd && !AmxUsable() && Bf16DotKernelRuns();
}

// The small-batch kernel widens bf16 in registers (linear_bench.cc,
// BM_Bf16SmallBatchPaths and BM_Linear, cold, on the AMD EPYC VM): with
// TANDEM_CPU_ISA=f32 (AVX-512) at 46 GB/s of bf16 at 1 row, where f32
// copies read 45 GB/s, i.e. twice the weights per second; with
// TANDEM_CPU_ISA=avx2 at 47-52 GB/s (f32 copies: 45-54), about 2x, and
// 78-84 and 96-103 GFLOP/s at 4 and 8 rows against 48 and 60. The portable
// kernel (no AVX2) read 18.6 GB/s, slower per weight than f32 copies: there
// bf16 checkpoints are still converted.
bool Bf16WidenedInPlace() { return MaxKernelIsa() >= KernelIsa::kAvx2; }

bool Bf16PacksHere() {
  return (CpuHasBf16() && !AmxUsable() && !OnednnBf16UsesAmx()) || PackedBf16Widens();
}

// The same kernels widen both 16-bit types.
bool F16WidenedInPlace() { return Bf16WidenedInPlace(); }

int64_t WidenedSmallBatchMaxRows() { return MaxKernelIsa() >= KernelIsa::kAvx512 ? 48 : 16; }

bool QuantUsesAmxKernel(int64_t m, int64_t k) {
  return !QuantLinearUsesGemv(m) && AmxLinearFits(m, k) && AmxUsable();
}

bool QuantUsesAmxInt8Kernel(int64_t m, int64_t k) {
  return QuantUsesAmxKernel(m, k) && AmxInt8Usable();
}

bool QuantUsesDotKernel(int64_t m) { return !QuantLinearUsesGemv(m) && Bf16UsesDotKernel(m); }

int64_t OnednnRows(int64_t m) {
  TANDEM_CHECK(m > 0);
  const auto pow2 = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(m)));
  const int64_t granule = std::max<int64_t>(16, pow2 / 8);
  return (m + granule - 1) / granule * granule;
}

}  // namespace internal

void ReferenceLinear(const float* x, int64_t m, const float* w, int64_t n, int64_t k,
                     const float* bias, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias != nullptr ? static_cast<double>(bias[j]) : 0.0;
      const float* xr = x + i * k;
      const float* wr = w + j * k;
      for (int64_t l = 0; l < k; ++l) acc += static_cast<double>(xr[l]) * wr[l];
      y[i * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace tandem::ops
