#include "cpu_worker/ops/bf16_packed.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/bf16_dot_linear.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal {
namespace {

#define TANDEM_BF16_PACKED __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
// The widening kernel and the code both kernels share: AVX-512F only, so
// that nothing of it needs AVX512-BF16.
#define TANDEM_AVX512_PACKED __attribute__((target("avx512f,avx512bw,avx512vl")))

// PackBf16's blocks: 32 inputs by 64 outputs, 16 input pairs of 256 bytes.
constexpr int64_t kBlockK = 32, kRunN = 64;
constexpr int64_t kBlockBytes = kBlockK * kRunN * 2;
constexpr int64_t kPairBytes = kRunN * 4;

// Rows of x per pass over a run's blocks: 4 accumulators a row, so six
// rows take 24 of the 32 vector registers next to the 4 weight vectors;
// five beside the 8 widened ones (GroupWiden).
constexpr int kGroupRows = 6;
constexpr int kWidenGroupRows = 5;
// Each group of rows passes over this many blocks (16 KiB, held in L1)
// before the next group does, its accumulators stored and reloaded
// unchanged between chunks, so the weight comes from DRAM once for all the
// rows. (One group alone measured the same with its accumulators kept in
// registers over the whole run.)
constexpr int64_t kChunkBlocks = 4;
// Rows of x per slice: the rows' accumulators of one run (slice x 64
// floats) stay in a stack buffer of 8 KiB.
constexpr int64_t kSliceRows = 32;
// A thread's item is one stream; with several groups, its first 4 KiB are
// left to the hardware prefetchers, the rest of its first chunk is fetched
// at the first step.
constexpr int64_t kUnfetchedBytes = 4096;

// How x meets the weight: rounded to bf16 for vdpbf16ps (AVX512-BF16), or
// kept in f32 against the weight widened exactly to f32 in registers.
enum class Kind { kDot, kWiden };

struct Task {
  const uint8_t* w;  // the packed weight
  int64_t blocks;    // blocks per run: (k + 31) / 32
  // x in blocks of 32 inputs interleaved by row (block b of row r at
  // (b * m + r) * 32 elements, zero-padded): bf16 as Bf16BlockRows writes
  // it (kDot, read as pairs), or f32 (kWiden, F32BlockRows).
  const void* x;
  int64_t m, n;
  const float* bias;
  float* y;
};

// The prefetch of a thread's stream where several groups of rows share each
// chunk: the cursor moves on with each pair step of each group, fetching
// the chunk after the one they read (16 KiB) spread over all their steps
// on this one, so that the fetches run a chunk's compute time ahead. On
// the Zen 4 VM 16 rows ran at 385-405 GFLOP/s so and 298-318 without.
// One group (up to 6 rows) reads each byte once, as fast as the arithmetic
// lets it, and is left to the hardware prefetchers: fetched in software
// as above, one row read 30-32 GB/s whatever the sweep, against 33-35 in
// the VM's slow bandwidth phase and 57-60 in its fast one without (4 and 6
// rows 10-20 % faster too; BM_Bf16SmallBatchPaths path 7). The widening
// kernel runs on Intel cores (AVX-512 without AVX512-BF16), where one
// group is fetched too: on a 2-vCPU Skylake-SP VM one row read 15.6-16.5
// GB/s so against 12.3-13.9 without (plain read sweep 17-18), four rows
// 15.4-15.9 against 11.1-11.2. `rate` is bytes per step in 1/65536ths (no
// division in the loop).
struct Fetch {
  uintptr_t* cursor = nullptr;  // null: no prefetch
  uintptr_t origin = 0, end = 0;
  uint64_t rate = 0, step = 0;
};

// One pair step's share of the prefetch (nothing where f has no cursor).
template <PrefetchLevel L>
inline void FetchStep(Fetch& f, uintptr_t* cursor) {
  if (f.cursor == nullptr) return;
  ++f.step;
  FetchLinesUpTo<L>(cursor, f.origin + ((f.step * f.rate) >> 16), f.end);
}

// A group's R x 64 accumulators from `acc` (zero if `first`), and back.
// (AVX-512F only, so that they inline into both kernels' groups.)
template <int R>
TANDEM_AVX512_PACKED inline void LoadAccumulators(__m512 (&a)[R][4], const float* acc,
                                                  bool first) {
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      a[r][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + r * kRunN + 16 * v);
    }
  }
}
template <int R>
TANDEM_AVX512_PACKED inline void StoreAccumulators(const __m512 (&a)[R][4], float* acc) {
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_ps(acc + r * kRunN + 16 * v, a[r][v]);
  }
}

// Rows [i, i + R) of x against the blocks [b0, b0 + count) of run `run`,
// added to acc (R x 64 floats, zeroed first if `first`).
template <int R, PrefetchLevel L>
TANDEM_BF16_PACKED void GroupDot(const Task& t, int64_t run, int64_t b0, int64_t count, int64_t i,
                              bool first, float* acc, Fetch& f) {
  __m512 a[R][4];
  LoadAccumulators<R>(a, acc, first);
  const uint8_t* w = t.w + (run * t.blocks + b0) * kBlockBytes;
  // The cursor in a register over the loop, not through the pointer.
  uintptr_t cursor = f.cursor != nullptr ? *f.cursor : 0;
  for (int64_t b = 0; b < count; ++b, w += kBlockBytes) {
    // The block's 16 pairs of this group's rows: row r's at xb[r * 16 + p].
    const uint32_t* xb = static_cast<const uint32_t*>(t.x) + ((b0 + b) * t.m + i) * 16;
#pragma GCC unroll 2
    for (int p = 0; p < 16; ++p) {
      const uint8_t* wp = w + p * kPairBytes;
      FetchStep<L>(f, &cursor);
      __m512bh wv[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) wv[v] = (__m512bh)_mm512_load_si512(wp + 64 * v);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const auto xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(xb[r * 16 + p]));
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) a[r][v] = _mm512_dpbf16_ps(a[r][v], wv[v], xv);
      }
    }
  }
  if (f.cursor != nullptr) *f.cursor = cursor;
  StoreAccumulators<R>(a, acc);
}

// GroupDot's pass with the weight widened to f32 instead: each 64-byte
// vector of 16 outputs' input pairs gives the even inputs' weights by a
// shift (a bf16 is the upper half of the f32 of the same value) and the odd
// ones' by a mask, and each meets its input of every row broadcast by an
// FMA. The eight widened vectors of a pair step serve all R rows, so five
// rows (20 accumulators, 8 weights, 2 broadcasts: 30 of the 32 registers)
// keep the FMA port 91 % busy (40 FMAs to 4 shifts on it per pair step).
// Every output sums its inputs in order, in f32: the products are exact,
// as the in-place widening kernels' are (gemv.h); only the order of the
// sums differs from theirs.
template <int R, PrefetchLevel L>
TANDEM_AVX512_PACKED void GroupWiden(const Task& t, int64_t run, int64_t b0, int64_t count,
                                     int64_t i, bool first, float* acc, Fetch& f) {
  __m512 a[R][4];
  LoadAccumulators<R>(a, acc, first);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const uint8_t* w = t.w + (run * t.blocks + b0) * kBlockBytes;
  uintptr_t cursor = f.cursor != nullptr ? *f.cursor : 0;
  for (int64_t b = 0; b < count; ++b, w += kBlockBytes) {
    // The block's 32 inputs of this group's rows: row r's at xb[r * 32].
    const float* xb = static_cast<const float*>(t.x) + ((b0 + b) * t.m + i) * 32;
#pragma GCC unroll 2
    for (int p = 0; p < 16; ++p) {
      const uint8_t* wp = w + p * kPairBytes;
      FetchStep<L>(f, &cursor);
      __m512 even[4], odd[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m512i wv = _mm512_load_si512(wp + 64 * v);
        even[v] = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
        odd[v] = _mm512_castsi512_ps(_mm512_and_si512(wv, high));
      }
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m512 x0 = _mm512_set1_ps(xb[r * 32 + 2 * p]);
        const __m512 x1 = _mm512_set1_ps(xb[r * 32 + 2 * p + 1]);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          a[r][v] = _mm512_fmadd_ps(even[v], x0, a[r][v]);
          a[r][v] = _mm512_fmadd_ps(odd[v], x1, a[r][v]);
        }
      }
    }
  }
  if (f.cursor != nullptr) *f.cursor = cursor;
  StoreAccumulators<R>(a, acc);
}

template <int R, Kind K, PrefetchLevel L>
TANDEM_AVX512_PACKED void Group(const Task& t, int64_t run, int64_t b0, int64_t count, int64_t i,
                                bool first, float* acc, Fetch& f) {
  if constexpr (K == Kind::kDot) {
    GroupDot<R, L>(t, run, b0, count, i, first, acc, f);
  } else {
    GroupWiden<R, L>(t, run, b0, count, i, first, acc, f);
  }
}

template <Kind K, PrefetchLevel L>
TANDEM_AVX512_PACKED void GroupOf(int rows, const Task& t, int64_t run, int64_t b0,
                                  int64_t count, int64_t i, bool first, float* acc, Fetch& f) {
  switch (rows) {
    case 1:
      return Group<1, K, L>(t, run, b0, count, i, first, acc, f);
    case 2:
      return Group<2, K, L>(t, run, b0, count, i, first, acc, f);
    case 3:
      return Group<3, K, L>(t, run, b0, count, i, first, acc, f);
    case 4:
      return Group<4, K, L>(t, run, b0, count, i, first, acc, f);
    case 5:
      return Group<5, K, L>(t, run, b0, count, i, first, acc, f);
    default:  // six rows (GroupWiden takes five at most)
      return Group<K == Kind::kDot ? 6 : 5, K, L>(t, run, b0, count, i, first, acc, f);
  }
}

// Runs [r0, r1) for all rows of x. Each slice of rows is shared out over
// groups of near-equal size (16 rows: 6, 5, 5), which only decides which
// rows are computed together: every output sums its pairs in order.
template <Kind K, PrefetchLevel L>
TANDEM_AVX512_PACKED void Runs(const Task& t, int64_t r0, int64_t r1) {
  const int64_t runs = (t.n + kRunN - 1) / kRunN;
  const uintptr_t end = reinterpret_cast<uintptr_t>(t.w + runs * t.blocks * kBlockBytes);
  uintptr_t cursor =
      reinterpret_cast<uintptr_t>(t.w + r0 * t.blocks * kBlockBytes) + kUnfetchedBytes;
  alignas(64) float acc[kSliceRows * kRunN];
  for (int64_t run = r0; run < r1; ++run) {
    const int64_t j0 = run * kRunN;
    const int64_t outs = std::min(kRunN, t.n - j0);
    for (int64_t s0 = 0; s0 < t.m; s0 += kSliceRows) {
      const int64_t rows = std::min(kSliceRows, t.m - s0);
      constexpr int64_t kMaxRows = K == Kind::kDot ? kGroupRows : kWidenGroupRows;
      const int64_t groups = (rows + kMaxRows - 1) / kMaxRows;
      for (int64_t b0 = 0; b0 < t.blocks; b0 += kChunkBlocks) {
        const int64_t count = std::min(kChunkBlocks, t.blocks - b0);
        const auto at = reinterpret_cast<uintptr_t>(t.w + (run * t.blocks + b0) * kBlockBytes);
        Fetch f;
        if (s0 == 0 && (groups > 1 || K == Kind::kWiden)) {
          f.cursor = &cursor;
          f.end = end;
          const auto bytes = static_cast<uint64_t>(count * kBlockBytes);
          f.rate = (bytes << 16) / static_cast<uint64_t>(groups * count * 16);
          f.origin = at + bytes;
        }
        int64_t i = 0;
        for (int64_t g = 0; g < groups; ++g) {
          const int size = static_cast<int>(rows / groups + (g < rows % groups ? 1 : 0));
          GroupOf<K, L>(size, t, run, b0, count, s0 + i, b0 == 0, acc + i * kRunN, f);
          i += size;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* out = t.y + (s0 + r) * t.n + j0;
        const float* in = acc + r * kRunN;
        for (int64_t j = 0; j < outs; ++j) {
          out[j] = in[j] + (t.bias != nullptr ? t.bias[j0 + j] : 0.0f);
        }
      }
    }
  }
}

// x's rows [r0, r1) in f32 blocks of 32 interleaved by row, as
// Bf16BlockRows lays out bf16 ones: block b of row r at (b * m + r) * 32,
// the last block zero-padded (the padding meets the weight's zero padding:
// a zero, where whatever lies past x's end could be a NaN).
TANDEM_AVX512_PACKED void F32BlockRows(const float* x, int64_t m, int64_t k, int64_t r0,
                                       int64_t r1, float* dst) {
  const int64_t blocks = (k + kBlockK - 1) / kBlockK;
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = x + r * k;
    for (int64_t b = 0; b < blocks; ++b) {
      float* out = dst + (b * m + r) * kBlockK;
      for (int h = 0; h < 2; ++h) {
        const int64_t at = b * kBlockK + h * 16;
        const int64_t left = std::clamp<int64_t>(k - at, 0, 16);
        const auto mask = static_cast<__mmask16>((1u << left) - 1);
        _mm512_storeu_ps(out + h * 16, _mm512_maskz_loadu_ps(mask, src + at));
      }
    }
  }
}

}  // namespace

bool PackedBf16KernelHere() { return CpuHasBf16() || PackedBf16Widens(); }

bool PackedBf16Widens() { return !CpuHasBf16() && MaxKernelIsa() >= KernelIsa::kAvx512; }

int64_t PackedBf16Elements(int64_t n, int64_t k) {
  return (n + kRunN - 1) / kRunN * ((k + kBlockK - 1) / kBlockK) * kBlockK * kRunN;
}

int64_t PackedBf16Index(int64_t j, int64_t i, int64_t k) {
  const int64_t blocks = (k + kBlockK - 1) / kBlockK;
  const int64_t block = j / kRunN * blocks + i / kBlockK;
  const int64_t in = i % kBlockK;
  return block * kBlockK * kRunN + (in / 2) * kRunN * 2 + (j % kRunN) * 2 + in % 2;
}

void PackedBf16Linear(const float* x, int64_t m, const void* packed, int64_t n, int64_t k,
                      const float* bias, float* y) {
  const PackedBf16Call call{x, m, packed, n, k, bias, y};
  PackedBf16LinearGroup(&call, 1);
}

void PackedBf16LinearGroup(const PackedBf16Call* calls, int64_t count) {
  TANDEM_CHECK(PackedBf16KernelHere() && "the packed bf16 kernel needs AVX-512");
  // CpuHasBf16 reads the environment: once per call, not per item.
  const Kind kind = CpuHasBf16() ? Kind::kDot : Kind::kWiden;
  const int64_t x_bytes = kind == Kind::kDot ? 2 : 4;
  // Per call: where its x begins in the scratch (a call on the same x as
  // an earlier one reads that one's), in bytes.
  thread_local std::vector<int64_t> x_at;
  thread_local std::vector<uint8_t> scratch;
  thread_local std::vector<Task> tasks;
  struct Item {
    int64_t call, begin, end;  // rows of x to convert, or runs to compute
  };
  thread_local std::vector<Item> rows, items;
  x_at.assign(static_cast<size_t>(count), -1);
  rows.clear();
  int64_t bytes = 0, work = 0;
  for (int64_t c = 0; c < count; ++c) {
    const PackedBf16Call& a = calls[c];
    TANDEM_CHECK(a.m >= 0 && a.n > 0 && a.k > 0 && a.w != nullptr);
    TANDEM_CHECK((a.x != nullptr && a.y != nullptr) || a.m == 0);
    work += a.n * a.k * std::min<int64_t>(a.m, 8);
    for (int64_t e = 0; e < c && x_at[c] < 0; ++e) {
      const PackedBf16Call& b = calls[e];
      if (b.x == a.x && b.m == a.m && b.k == a.k) x_at[c] = x_at[e];
    }
    if (x_at[c] < 0) {
      x_at[c] = bytes;
      bytes += a.m * ((a.k + kBlockK - 1) / kBlockK * kBlockK) * x_bytes;
      for (int64_t r = 0; r < a.m; ++r) rows.push_back({c, r, r + 1});
    }
  }
  // 64-byte aligned, so that rows converted by different threads share no
  // line (each row's blocks are whole lines).
  if (static_cast<int64_t>(scratch.size()) < bytes + 64) {
    scratch.resize(static_cast<size_t>(bytes + 64));
  }
  uint8_t* const base =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);

  // Items of about 1 MiB of weight (whole runs), handed out dynamically: a
  // thread's runs are one stream, and a thread that loses a time slice is
  // covered by the other. The calls' items share one parallel region.
  const bool parallel = work > (1 << 17);
  tasks.resize(static_cast<size_t>(count));
  items.clear();
  for (int64_t c = 0; c < count; ++c) {
    const PackedBf16Call& a = calls[c];
    if (a.m == 0) continue;
    const int64_t blocks = (a.k + kBlockK - 1) / kBlockK;
    Task& t = tasks[static_cast<size_t>(c)];
    t.w = static_cast<const uint8_t*>(a.w);
    t.blocks = blocks;
    t.x = base + x_at[c];
    t.m = a.m;
    t.n = a.n;
    t.bias = a.bias;
    t.y = a.y;
    const int64_t runs = (a.n + kRunN - 1) / kRunN;
    const int64_t item = StreamItemRows(runs, blocks * kBlockBytes, 1, parallel);
    for (int64_t r0 = 0; r0 < runs; r0 += item) items.push_back({c, r0, std::min(runs, r0 + item)});
  }
  static const bool l2 = PackedPrefetchLevel() == PrefetchLevel::kL2;
  // (The region's other threads see their own thread_local vectors.)
  const int64_t* const x_offsets = x_at.data();
  const Item* const row_list = rows.data();
  const Item* const item_list = items.data();
  const Task* const task_list = tasks.data();
  const auto row_count = static_cast<int64_t>(rows.size());
  const auto item_count = static_cast<int64_t>(items.size());
#pragma omp parallel if (parallel)
  {
    // x laid out in blocks (rounded to bf16 for vdpbf16ps) on all the
    // threads, then the products.
#pragma omp for schedule(static)
    for (int64_t i = 0; i < row_count; ++i) {
      const Item& r = row_list[i];
      const PackedBf16Call& a = calls[r.call];
      void* dst = base + x_offsets[r.call];
      if (kind == Kind::kDot) {
        Bf16BlockRows(a.x, a.m, a.k, r.begin, r.end, static_cast<uint16_t*>(dst));
      } else {
        F32BlockRows(a.x, a.m, a.k, r.begin, r.end, static_cast<float*>(dst));
      }
    }
#pragma omp for schedule(dynamic)
    for (int64_t i = 0; i < item_count; ++i) {
      const Item& it = item_list[i];
      const Task& t = task_list[it.call];
      if (kind == Kind::kDot) {
        if (l2) {
          Runs<Kind::kDot, PrefetchLevel::kL2>(t, it.begin, it.end);
        } else {
          Runs<Kind::kDot, PrefetchLevel::kL1>(t, it.begin, it.end);
        }
      } else if (l2) {
        Runs<Kind::kWiden, PrefetchLevel::kL2>(t, it.begin, it.end);
      } else {
        Runs<Kind::kWiden, PrefetchLevel::kL1>(t, it.begin, it.end);
      }
    }
  }
}

void ReferencePackedBf16Linear(const float* x, int64_t m, const void* packed, int64_t n, int64_t k,
                               const float* bias, float* y) {
  const auto* w = static_cast<const uint16_t*>(packed);
  const bool round_x = !PackedBf16Widens();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const float xi = round_x ? Bf16ToF32(F32ToBf16(x[r * k + i])) : x[r * k + i];
        const float wi = Bf16ToF32(w[PackedBf16Index(j, i, k)]);
        sum += static_cast<double>(xi) * static_cast<double>(wi);
      }
      y[r * n + j] = static_cast<float>(sum) + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

}  // namespace tandem::ops::internal
