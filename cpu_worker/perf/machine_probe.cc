#include "cpu_worker/perf/machine_probe.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/quant_packed.h"
#include "cpu_worker/ops/quant_gemv.h"
#include "cpu_worker/ops/stream_prefetch.h"
#include "cpu_worker/perf/timing.h"

namespace tandem::perf {
namespace {

// Keeps the sweeps' results alive so the compiler cannot drop the loads.
volatile uint64_t g_sink = 0;

// XOR of n words, read as kStreams interleaved sequential streams (one per
// contiguous eighth): the engine's kernels stream several weight rows at
// once, and a single stream per core leaves part of the bandwidth unused
// (fewer misses in flight). One vector accumulator per stream is plenty: a
// 1-cycle XOR per 64-byte load is far above what memory delivers to a core.
constexpr int64_t kStreams = 8;

__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t XorRange(const uint64_t* p,
                                                                               int64_t n) {
  const int64_t len = n / kStreams;
  const uint64_t *s0 = p, *s1 = p + len, *s2 = p + 2 * len, *s3 = p + 3 * len, *s4 = p + 4 * len,
                 *s5 = p + 5 * len, *s6 = p + 6 * len, *s7 = p + 7 * len;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
#pragma omp simd reduction(^ : a0, a1, a2, a3, a4, a5, a6, a7)
  for (int64_t i = 0; i < len; ++i) {
    a0 ^= s0[i];
    a1 ^= s1[i];
    a2 ^= s2[i];
    a3 ^= s3[i];
    a4 ^= s4[i];
    a5 ^= s5[i];
    a6 ^= s6[i];
    a7 ^= s7[i];
  }
  uint64_t acc = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
  for (int64_t i = kStreams * len; i < n; ++i) acc ^= p[i];
  return acc;
}

// XorRange with each stream prefetched 1 KiB ahead into level L, as the
// GEMV kernels do (stream_prefetch.h): on an AMD EPYC VM the plain sweep
// read ~12% below this one and below what the single-row kernels reached.
template <ops::PrefetchLevel L>
__attribute__((target("avx512f"))) uint64_t XorRangePrefetchedAvx512(const uint64_t* p,
                                                                     int64_t n) {
  constexpr int64_t kAhead = 128;  // words: 1 KiB
  const int64_t len = n / kStreams / 8 * 8;
  __m512i acc[kStreams];
  for (auto& a : acc) a = _mm512_setzero_si512();
  for (int64_t i = 0; i < len; i += 8) {
#pragma GCC unroll 8
    for (int s = 0; s < kStreams; ++s) {
      const uint64_t* q = p + s * len + i;
      ops::PrefetchLine<L>(q + kAhead);
      acc[s] = _mm512_xor_si512(acc[s], _mm512_loadu_si512(q));
    }
  }
  for (int s = 1; s < kStreams; ++s) acc[0] = _mm512_xor_si512(acc[0], acc[s]);
  uint64_t out = static_cast<uint64_t>(_mm512_reduce_add_epi64(acc[0]));
  for (int64_t i = kStreams * len; i < n; ++i) out ^= p[i];
  return out;
}

bool PrefetchedSweepRuns() {
  return ops::HostCpuFeatures().avx512f && ops::HostCpuFeatures().os_avx512;
}

// Thread t's part [begin, end) of n words split over nt threads, in whole
// cache lines (8 words) so that no line is shared.
void Part(int64_t n, int t, int nt, int64_t* begin, int64_t* end) {
  const int64_t lines = n / 8;
  *begin = lines * t / nt * 8;
  *end = t + 1 == nt ? n : lines * (t + 1) / nt * 8;
}

TensorView View(DType dtype, int64_t n, int64_t k, const void* data, int64_t nbytes) {
  TensorView v;
  v.name = "probe.weight";
  v.dtype = dtype;
  v.shape = {n, k};
  v.data = data;
  v.nbytes = nbytes;
  return v;
}

// Deterministic values in [-0.5, 0.5): zeros would let nothing go wrong
// that matters here, but keep the int8 scales realistic.
void FillValues(float* v, int64_t n) {
  uint32_t s = 12345;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) - 0.5f;
  }
}

}  // namespace

std::string ReadSweepDescription() {
  std::string s = "read sweep, all threads, 8 streams each";
  if (PrefetchedSweepRuns()) {
    absl::StrAppend(&s, ", plain or prefetched into ",
                    ops::PrefetchLevelName(ops::StreamPrefetchLevel()));
  }
  return s;
}

absl::StatusOr<ReadSweep> ReadSweep::Create(int64_t bytes) {
  if (bytes < 64) return absl::InvalidArgumentError("read bandwidth: need >= 64 bytes");
  const int64_t words = bytes / 8;
  std::unique_ptr<uint64_t[]> buf(new (std::nothrow) uint64_t[static_cast<size_t>(words)]);
  if (buf == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("read bandwidth: cannot allocate ", bytes));
  }
  uint64_t* p = buf.get();
  // First touch by the thread that later reads the part (NUMA placement).
#pragma omp parallel
  {
    int64_t b, e;
    Part(words, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    for (int64_t i = b; i < e; ++i) p[i] = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  }
  return ReadSweep(std::move(buf), words);
}

// One sweep over the buffer: plain, or (with AVX-512) with software
// prefetch at the kernels' level.
void ReadSweep::Sweep(bool prefetch) const {
  const uint64_t* p = words_.get();
  const int64_t words = n_;
  const bool l2 = ops::StreamPrefetchLevel() == ops::PrefetchLevel::kL2;
  uint64_t acc = 0;
#pragma omp parallel reduction(^ : acc)
  {
    int64_t b, e;
    Part(words, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (!prefetch) {
      acc ^= XorRange(p + b, e - b);
    } else if (l2) {
      acc ^= XorRangePrefetchedAvx512<ops::PrefetchLevel::kL2>(p + b, e - b);
    } else {
      acc ^= XorRangePrefetchedAvx512<ops::PrefetchLevel::kL1>(p + b, e - b);
    }
  }
  g_sink = g_sink ^ acc;
}

std::vector<double> ReadSweep::Measure(int warmup, int repeats) const {
  // Both ways each time, the faster counting: the roofline is what the
  // memory can deliver, and which pattern gets there differs between CPUs.
  const bool prefetched = PrefetchedSweepRuns();
  auto plain = [this] { Sweep(false); };
  auto with_prefetch = [this] { Sweep(true); };
  // A repeat sweeps for at least kMinRepeatSeconds and keeps its fastest
  // sweep: on a shared machine a small buffer's sweep (well under a
  // millisecond) that loses its core, or one thread's, for a time slice
  // says nothing about the memory, and a bandwidth figure that is too low
  // inflates every memory-bound fraction drawn with it. A buffer that
  // outlasts the minimum is swept once, so large sweeps stay plain samples.
  constexpr double kMinRepeatSeconds = 0.02;
  for (int i = 0; i < warmup; ++i) {
    plain();
    if (prefetched) with_prefetch();
  }
  std::vector<double> gbs;
  for (int i = 0; i < repeats; ++i) {
    double best = 0, spent = 0;
    do {
      double s = TimeRepeats(0, 1, plain)[0];
      if (prefetched) s = std::min(s, TimeRepeats(0, 1, with_prefetch)[0]);
      best = best == 0 ? s : std::min(best, s);
      spent += s;
    } while (spent < kMinRepeatSeconds);
    gbs.push_back(static_cast<double>(n_ * 8) / best / 1e9);
  }
  return gbs;
}

absl::StatusOr<std::vector<double>> ReadBandwidthGbs(int64_t bytes, int warmup, int repeats) {
  if (bytes < 64 || repeats <= 0 || warmup < 0) {
    return absl::InvalidArgumentError("read bandwidth: need >= 64 bytes and repeats > 0");
  }
  TANDEM_ASSIGN_OR_RETURN(ReadSweep sweep, ReadSweep::Create(bytes));
  return sweep.Measure(warmup, repeats);
}

absl::StatusOr<std::vector<double>> CopyBandwidthGbs(int64_t bytes, int warmup, int repeats) {
  if (bytes <= 0 || repeats <= 0 || warmup < 0) {
    return absl::InvalidArgumentError("copy bandwidth: sizes must be positive");
  }
  std::vector<uint8_t> src(static_cast<size_t>(bytes), 1), dst(src.size(), 0);
  return Rates(static_cast<double>(bytes) / 1e9, TimeRepeats(warmup, repeats, [&] {
                 std::memcpy(dst.data(), src.data(), src.size());
               }));
}

int64_t Int8KernelMaxRows() {
  // Q8_0 weights packed at load, as the host device loads them where that
  // is faster, run the packed kernel up to its own threshold.
  if (ops::internal::QuantPacksHere()) return ops::internal::kPackedQuantMaxRows;
  // Else Linear's own predicate, so the probe follows wherever the threshold
  // moves (it depends on whether the CPU has a bf16 GEMM to lose against).
  int64_t m = 0;
  while (m < 4096 && ops::internal::QuantLinearUsesGemv(m + 1)) ++m;
  return m;
}

bool Int8KernelTakesRows(int64_t m) {
  return m > 0 && (m <= Int8KernelMaxRows() || ops::internal::QuantPacksHere());
}

absl::StatusOr<GemmMeasurement> MeasureGemm(GemmKind kind, int64_t m, int64_t n, int64_t k,
                                            int warmup, int repeats) {
  if (m <= 0 || n <= 0 || k <= 0 || repeats <= 0 || warmup < 0) {
    return absl::InvalidArgumentError("gemm probe: sizes must be positive");
  }
  const bool int8 = kind == GemmKind::kInt8 || kind == GemmKind::kInt8Q4;
  if (int8 && k % 32 != 0) {
    return absl::InvalidArgumentError("gemm probe: the int8 kernel takes K a multiple of 32");
  }
  if (int8 && !Int8KernelTakesRows(m)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm probe: the int8 kernel takes at most ", Int8KernelMaxRows(), " rows here"));
  }
  std::vector<float> wf(static_cast<size_t>(n * k));
  FillValues(wf.data(), n * k);
  // The weight bytes in the kind's storage; LinearWeight uses them as the
  // engine's host device does (bf16 packed where that is faster).
  const DType dtype = kind == GemmKind::kF32    ? DType::kF32
                      : kind == GemmKind::kBF16 ? DType::kBF16
                      : kind == GemmKind::kInt8 ? DType::kQ8_0
                                                : DType::kQ4_0;
  TANDEM_ASSIGN_OR_RETURN(const int64_t nbytes, DTypeBytes(dtype, n * k));
  std::vector<uint8_t> wbytes(static_cast<size_t>(nbytes));
  QuantizeFromF32(dtype, wf.data(), n * k, wbytes.data());
  wf = {};
  TANDEM_ASSIGN_OR_RETURN(
      ops::LinearWeight lw,
      ops::LinearWeight::Create(View(dtype, n, k, wbytes.data(), nbytes),
                                kind == GemmKind::kF32    ? ops::ComputeType::kF32
                                : kind == GemmKind::kBF16 ? ops::ComputeType::kBF16
                                                          : ops::ComputeType::kQuantized,
                                ops::WeightLayout::kCpuPacked));

  GemmMeasurement r;
  r.m = m;
  r.n = n;
  r.k = k;
  switch (kind) {
    case GemmKind::kF32:
      r.path = "ops::Linear, f32 weights (oneDNN f32 GEMM)";
      break;
    case GemmKind::kBF16:
      r.path = lw.storage() == ops::WeightStorage::kBF16Packed &&
                       lw.compute_type() == ops::ComputeType::kF32
                   ? "ops::Linear, bf16 weights packed, widened to f32 in the packed kernel "
                     "(no AVX512-BF16)"
               : lw.storage() == ops::WeightStorage::kBF16Packed
                   ? "ops::Linear, bf16 weights packed (oneDNN bf16 GEMM: AVX512-BF16)"
               : lw.compute_type() == ops::ComputeType::kBF16
                   ? "ops::Linear, bf16 weights (oneDNN bf16 GEMM: AVX512-BF16/AMX)"
                   : "ops::Linear, bf16 weights widened to f32 (no AVX512-BF16)";
      break;
    case GemmKind::kInt8:
    case GemmKind::kInt8Q4: {
      const std::string type(DTypeName(dtype));
      if (!lw.quantized()) {
        return absl::InternalError(
            absl::StrCat("gemm probe: the ", type, " weight was not kept quantized"));
      }
      r.path = lw.packed_quant()
                   ? absl::StrCat("ops::Linear, ", type,
                                  " weights packed (int8 quant_packed kernel, ",
                                  ops::KernelIsaName(ops::MaxKernelIsa()), ")")
                   : absl::StrCat("ops::Linear, ", type, " weights (int8 quant_gemv kernel, ",
                                  ops::KernelIsaName(ops::MaxKernelIsa()), ")");
      break;
    }
  }
  std::vector<float> x(static_cast<size_t>(m * k));
  FillValues(x.data(), m * k);
  std::vector<float> y(static_cast<size_t>(m * n));
  const double gflop =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / 1e9;
  r.gflops = Rates(gflop, TimeRepeats(warmup, repeats,
                                      [&] { ops::Linear(x.data(), m, lw, nullptr, y.data()); }));
  return r;
}

absl::StatusOr<std::vector<double>> LinearCallOverheadUs(int warmup, int repeats) {
  if (repeats <= 0 || warmup < 0) return absl::InvalidArgumentError("overhead probe: repeats");
  constexpr int64_t kDim = 16;
  constexpr int kCalls = 1000;
  std::vector<float> w(kDim * kDim, 0.5f), x(kDim, 1.0f), y(kDim);
  TANDEM_ASSIGN_OR_RETURN(
      ops::LinearWeight lw,
      ops::LinearWeight::Create(View(DType::kF32, kDim, kDim, w.data(), kDim * kDim * 4),
                                ops::ComputeType::kF32));
  std::vector<double> us = TimeRepeats(warmup, repeats, [&] {
    for (int i = 0; i < kCalls; ++i) ops::Linear(x.data(), 1, lw, nullptr, y.data());
  });
  for (double& t : us) t = t / kCalls * 1e6;
  return us;
}

}  // namespace tandem::perf
