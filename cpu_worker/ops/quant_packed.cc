#include "cpu_worker/ops/quant_packed.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/quant.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/amx_linear.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal {
namespace {

using quant::ActQ8Packed;
using quant::kBlock;

using quant::LocatePacked;
using quant::PackedBlockBytes;
using quant::PackedMinsOffset;
using quant::PackedScalesOffset;

// Block b's quants (PackedBlockBytes(t) bytes) and its f16 scale and min
// (Q4_1) within a GGUF row; Q8_0 bytes are stored as q + 128.
struct BlockParts {
  const uint8_t* q;
  uint16_t d, m;
};
BlockParts PartsOf(DType t, const void* row, int64_t b) {
  switch (t) {
    case DType::kQ8_0: {
      const auto& x = static_cast<const BlockQ8_0*>(row)[b];
      return {reinterpret_cast<const uint8_t*>(x.qs), x.d, 0};
    }
    case DType::kQ4_0: {
      const auto& x = static_cast<const BlockQ4_0*>(row)[b];
      return {x.qs, x.d, 0};
    }
    default: {
      const auto& x = static_cast<const BlockQ4_1*>(row)[b];
      return {x.qs, x.d, x.m};
    }
  }
}

// The byte of block quants as packed: Q8_0's signed q as q + 128 (the
// unsigned operand of vpdpbusd), nibbles as they are.
uint8_t PackedByte(DType t, uint8_t q) { return t == DType::kQ8_0 ? q ^ 0x80 : q; }

void PackRow(DType t, const void* blocks, int64_t nb, uint8_t* dst) {
  const int64_t groups = PackedBlockBytes(t) / 4;
  auto* scales = reinterpret_cast<uint16_t*>(dst + PackedScalesOffset(t, nb));
  auto* mins = reinterpret_cast<uint16_t*>(dst + PackedMinsOffset(t, nb));
  for (int64_t i = 0; i < nb; ++i) {
    const BlockParts b = PartsOf(t, blocks, i);
    const quant::PackedSuperblock at = LocatePacked(t, nb, i / 16);
    uint8_t* q = dst + at.offset + 4 * (i % 16);
    for (int64_t g = 0; g < groups; ++g) {
      for (int e = 0; e < 4; ++e) q[g * at.group_bytes + e] = PackedByte(t, b.q[4 * g + e]);
    }
    scales[i] = b.d;
    if (t == DType::kQ4_1) mins[i] = b.m;
  }
}

// The kernel runs on AVX-512 BW: with vpdpbusd where the CPU has
// AVX512-VNNI, else with its exact equivalent (quant_packed_avx512bw.cc).
bool PackedKernelRuns() {
  static const bool yes = MaxKernelIsa() >= KernelIsa::kAvx512;
  return yes;
}

using RowsFn = void (*)(const quant::PackedTask&, int64_t, int64_t);
RowsFn PackedRows() {
  static const RowsFn rows = MaxKernelIsa() >= KernelIsa::kAvx512Vnni ? quant::PackedRowsAvx512Vnni
                                                                        : quant::PackedRowsAvx512Bw;
  return rows;
}

}  // namespace

void ReferencePrepPackedQ8Row(const float* x, int64_t nb, ActQ8Packed* out) {
  for (int64_t s = 0; s < (nb + 15) / 16; ++s) {
    ActQ8Packed& a = out[s];
    std::memset(&a, 0, sizeof(a));
    for (int64_t lane = 0; lane < std::min<int64_t>(16, nb - 16 * s); ++lane) {
      int8_t q[kBlock];
      a.dx[lane] = quant::QuantizeBlock(x + (16 * s + lane) * kBlock, q);
      int32_t sum = 0;
      for (int j = 0; j < kBlock; ++j) sum += q[j];
      a.comp[lane] = -128 * sum;
      for (int g = 0; g < 8; ++g) std::memcpy(a.q + 64 * g + 4 * lane, q + 4 * g, 4);
    }
  }
}

bool PacksAsQuant(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1; }

int64_t PackedQuantRowBytes(DType t, int64_t k) {
  TANDEM_CHECK(PacksAsQuant(t));
  const int64_t bytes = k / kBlock * DTypeBlockBytes(t);
  return (bytes + 63) / 64 * 64;
}

int64_t PackedQuantBytes(DType t, int64_t n, int64_t k) { return n * PackedQuantRowBytes(t, k); }

bool QuantPacksHere() { return PackedKernelRuns() && !AmxUsable(); }

void PackQuant(DType t, const void* src, int64_t n, int64_t k, void* dst) {
  TANDEM_CHECK(PacksAsQuant(t) && n > 0 && k > 0 && k % kBlock == 0);
  const int64_t nb = k / kBlock, row_bytes = PackedQuantRowBytes(t, k);
  const int64_t used = nb * DTypeBlockBytes(t);
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
#pragma omp parallel for schedule(static) if (n * k > (1 << 16))
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* row = out + j * row_bytes;
    PackRow(t, in + j * used, nb, row);
    std::memset(row + used, 0, static_cast<size_t>(row_bytes - used));
  }
}

void UnpackQuantRow(DType t, const void* packed, int64_t k, void* blocks) {
  TANDEM_CHECK(PacksAsQuant(t));
  const int64_t nb = k / kBlock, groups = PackedBlockBytes(t) / 4;
  const auto* in = static_cast<const uint8_t*>(packed);
  const auto* scales = reinterpret_cast<const uint16_t*>(in + PackedScalesOffset(t, nb));
  const auto* mins = reinterpret_cast<const uint16_t*>(in + PackedMinsOffset(t, nb));
  auto* out = static_cast<uint8_t*>(blocks);
  const int64_t block_bytes = DTypeBlockBytes(t);
  for (int64_t i = 0; i < nb; ++i) {
    // GGUF blocks: the f16 scale, Q4_1's f16 min, then the quants.
    uint8_t* block = out + i * block_bytes;
    const int64_t head = t == DType::kQ4_1 ? 4 : 2;
    std::memcpy(block, scales + i, 2);
    if (t == DType::kQ4_1) std::memcpy(block + 2, mins + i, 2);
    const quant::PackedSuperblock at = LocatePacked(t, nb, i / 16);
    const uint8_t* src = in + at.offset + 4 * (i % 16);
    for (int64_t g = 0; g < groups; ++g) {
      for (int e = 0; e < 4; ++e) {
        block[head + 4 * g + e] = PackedByte(t, src[g * at.group_bytes + e]);
      }
    }
  }
}

bool PackedQuantTakesEveryBatch() {
  return QuantPacksHere() && MaxKernelIsa() >= KernelIsa::kAvx512Vnni;
}

int64_t PackedQuantSliceRows(int64_t k) {
  constexpr int64_t kSliceBytes = int64_t{512} << 10;
  // A row's activations: k quantized bytes and, per superblock of 512,
  // the scales and correction terms (ActQ8Packed).
  const int64_t row_bytes = (k / kBlock + 15) / 16 * static_cast<int64_t>(sizeof(ActQ8Packed));
  return std::max(kPackedQuantMaxRows, kSliceBytes / std::max<int64_t>(row_bytes, 1) / 4 * 4);
}

void PackedQuantLinear(DType t, const float* x, int64_t m, const void* w, int64_t n, int64_t k,
                       const float* bias, float* y) {
  const int64_t slice =
      m > kPackedQuantMaxRows ? PackedQuantSliceRows(k) : std::max<int64_t>(m, 1);
  int64_t i0 = 0;
  do {
    const PackedQuantCall call{t, x + i0 * k, std::min(slice, m - i0), w, n, k, bias, y + i0 * n};
    PackedQuantLinearGroup(&call, 1);
    i0 += slice;
  } while (i0 < m);
}

void PackedQuantLinearGroup(const PackedQuantCall* calls, int64_t count) {
  TANDEM_CHECK(PackedKernelRuns() && "packed quantized weights need AVX-512 BW");
  // Per call: where its activations begin in the scratch (a call on the same
  // x as an earlier one reads that one's), and whether it quantizes them.
  thread_local std::vector<int64_t> act_at;
  thread_local std::vector<char> quantizes;
  thread_local std::vector<ActQ8Packed> scratch;
  thread_local std::vector<quant::PackedTask> tasks;
  struct Item {
    int64_t task, n0, n1;
  };
  thread_local std::vector<Item> items;
  act_at.assign(static_cast<size_t>(count), -1);
  quantizes.assign(static_cast<size_t>(count), 0);
  int64_t acts = 0, work = 0;
  for (int64_t c = 0; c < count; ++c) {
    const PackedQuantCall& a = calls[c];
    TANDEM_CHECK(PacksAsQuant(a.t) && a.m >= 0 && a.n > 0 && a.k > 0 && a.k % kBlock == 0);
    work += a.n * a.k * std::min<int64_t>(a.m, 8);
    for (int64_t e = 0; e < c && act_at[c] < 0; ++e) {
      const PackedQuantCall& b = calls[e];
      if (b.x == a.x && b.m == a.m && b.k == a.k) act_at[c] = act_at[e];
    }
    if (act_at[c] < 0) {
      quantizes[c] = 1;
      act_at[c] = acts;
      acts += a.m * ((a.k / kBlock + 15) / 16);
    }
  }
  if (static_cast<int64_t>(scratch.size()) < acts) scratch.resize(static_cast<size_t>(acts));
  // The activations, quantized once (read by all the threads).
  for (int64_t c = 0; c < count; ++c) {
    const PackedQuantCall& a = calls[c];
    if (quantizes[c] == 0) continue;
    const int64_t nb = a.k / kBlock, supers = (nb + 15) / 16;
    ActQ8Packed* out = scratch.data() + act_at[c];
#pragma omp parallel for schedule(static) if (a.m * a.k > (1 << 16))
    for (int64_t i = 0; i < a.m; ++i) {
      quant::PrepPackedQ8RowAvx512(a.x + i * a.k, nb, out + i * supers);
    }
  }

  // Items of about 1 MiB of weight rows, handed out dynamically (as
  // QuantLinear's): a thread's rows are one stream, and a thread that loses
  // a time slice is covered by the other. Each output is one item's, and
  // the calls' items share one parallel region.
  const bool parallel = work > (1 << 17);
  tasks.resize(static_cast<size_t>(count));
  items.clear();
  for (int64_t c = 0; c < count; ++c) {
    const PackedQuantCall& a = calls[c];
    if (a.m == 0) continue;
    quant::PackedTask& t = tasks[static_cast<size_t>(c)];
    t.t = a.t;
    t.w = static_cast<const uint8_t*>(a.w);
    t.row_bytes = PackedQuantRowBytes(a.t, a.k);
    t.m = a.m;
    t.n = a.n;
    t.k = a.k;
    t.acts = scratch.data() + act_at[c];
    t.act_stride = (a.k / kBlock + 15) / 16;
    t.bias = a.bias;
    t.y = a.y;
    const int64_t item = StreamItemRows(a.n, t.row_bytes, 8, parallel);
    for (int64_t n0 = 0; n0 < a.n; n0 += item) items.push_back({c, n0, std::min(a.n, n0 + item)});
  }
  // (The region's other threads see their own thread_local vectors.)
  const Item* const item_list = items.data();
  const quant::PackedTask* const task_list = tasks.data();
  const auto total = static_cast<int64_t>(items.size());
  const RowsFn rows = PackedRows();
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t i = 0; i < total; ++i) {
    const Item& it = item_list[i];
    rows(task_list[it.task], it.n0, it.n1);
  }
}

void DequantPackedQuantRows(DType t, const void* w, int64_t k, int64_t r0, int64_t rows,
                            float* dst) {
  TANDEM_CHECK(PackedKernelRuns() && "packed quantized weights need AVX-512 BW");
  quant::DequantPackedAvx512(t, static_cast<const uint8_t*>(w), PackedQuantRowBytes(t, k), k, r0,
                             rows, dst);
}

void DequantPackedQuantRowsBf16(DType t, const void* w, int64_t k, int64_t r0, int64_t rows,
                                uint16_t* dst) {
  TANDEM_CHECK(CpuHasBf16() && MaxKernelIsa() >= KernelIsa::kAvx512Vnni &&
               "packed quantized weights dequantize to bf16 with AVX512-BF16 and VNNI");
  quant::DequantPackedBf16Avx512(t, static_cast<const uint8_t*>(w), PackedQuantRowBytes(t, k), k,
                                 r0, rows, dst);
}

}  // namespace tandem::ops::internal
