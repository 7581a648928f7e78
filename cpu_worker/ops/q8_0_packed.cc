#include "cpu_worker/ops/q8_0_packed.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/quant.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/amx_linear.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal {
namespace {

using quant::ActQ8Packed;
using quant::kBlock;

using quant::LocatePackedQ8;
using quant::PackedQ8ScalesOffset;

void PackRow(const BlockQ8_0* b, int64_t nb, uint8_t* dst) {
  auto* scales = reinterpret_cast<uint16_t*>(dst + PackedQ8ScalesOffset(nb));
  for (int64_t i = 0; i < nb; ++i) {
    const quant::PackedQ8Superblock at = LocatePackedQ8(nb, i / 16);
    uint8_t* q = dst + at.offset + 4 * (i % 16);
    for (int g = 0; g < 8; ++g) {
      for (int e = 0; e < 4; ++e) {
        q[g * at.group_bytes + e] = static_cast<uint8_t>(b[i].qs[4 * g + e]) ^ 0x80;
      }
    }
    scales[i] = b[i].d;
  }
}

bool Avx512Vnni() {
  static const bool yes = MaxKernelIsa() >= KernelIsa::kAvx512Vnni;
  return yes;
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

int64_t PackedQ8RowBytes(int64_t k) {
  const int64_t bytes = k / kBlock * static_cast<int64_t>(sizeof(BlockQ8_0));
  return (bytes + 63) / 64 * 64;
}

int64_t PackedQ8Bytes(int64_t n, int64_t k) { return n * PackedQ8RowBytes(k); }

bool Q8PacksHere() { return Avx512Vnni() && !AmxUsable(); }

void PackQ8_0(const void* src, int64_t n, int64_t k, void* dst) {
  TANDEM_CHECK(n > 0 && k > 0 && k % kBlock == 0);
  const int64_t nb = k / kBlock, row_bytes = PackedQ8RowBytes(k);
  const auto* in = static_cast<const BlockQ8_0*>(src);
  auto* out = static_cast<uint8_t*>(dst);
#pragma omp parallel for schedule(static) if (n * k > (1 << 16))
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* row = out + j * row_bytes;
    PackRow(in + j * nb, nb, row);
    const int64_t used = nb * static_cast<int64_t>(sizeof(BlockQ8_0));
    std::memset(row + used, 0, static_cast<size_t>(row_bytes - used));
  }
}

void UnpackQ8_0Row(const void* packed, int64_t k, void* blocks) {
  const int64_t nb = k / kBlock;
  const auto* in = static_cast<const uint8_t*>(packed);
  auto* b = static_cast<BlockQ8_0*>(blocks);
  const auto* scales = reinterpret_cast<const uint16_t*>(in + PackedQ8ScalesOffset(nb));
  for (int64_t i = 0; i < nb; ++i) {
    const quant::PackedQ8Superblock at = LocatePackedQ8(nb, i / 16);
    const uint8_t* q = in + at.offset + 4 * (i % 16);
    for (int g = 0; g < 8; ++g) {
      for (int e = 0; e < 4; ++e) {
        b[i].qs[4 * g + e] = static_cast<int8_t>(q[g * at.group_bytes + e] ^ 0x80);
      }
    }
    b[i].d = scales[i];
  }
}

void PackedQ8Linear(const float* x, int64_t m, const void* w, int64_t n, int64_t k,
                    const float* bias, float* y) {
  const PackedQ8Call call{x, m, w, n, k, bias, y};
  PackedQ8LinearGroup(&call, 1);
}

void PackedQ8LinearGroup(const PackedQ8Call* calls, int64_t count) {
  TANDEM_CHECK(Avx512Vnni() && "packed Q8_0 weights need AVX512-VNNI");
  // Per call: where its activations begin in the scratch (a call on the same
  // x as an earlier one reads that one's), and whether it quantizes them.
  thread_local std::vector<int64_t> act_at;
  thread_local std::vector<char> quantizes;
  thread_local std::vector<ActQ8Packed> scratch;
  thread_local std::vector<quant::PackedQ8Task> tasks;
  struct Item {
    int64_t task, n0, n1;
  };
  thread_local std::vector<Item> items;
  act_at.assign(static_cast<size_t>(count), -1);
  quantizes.assign(static_cast<size_t>(count), 0);
  int64_t acts = 0, work = 0;
  for (int64_t c = 0; c < count; ++c) {
    const PackedQ8Call& a = calls[c];
    TANDEM_CHECK(a.m >= 0 && a.n > 0 && a.k > 0 && a.k % kBlock == 0);
    work += a.n * a.k * std::min<int64_t>(a.m, 8);
    for (int64_t e = 0; e < c && act_at[c] < 0; ++e) {
      const PackedQ8Call& b = calls[e];
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
    const PackedQ8Call& a = calls[c];
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
    const PackedQ8Call& a = calls[c];
    if (a.m == 0) continue;
    quant::PackedQ8Task& t = tasks[static_cast<size_t>(c)];
    t.w = static_cast<const uint8_t*>(a.w);
    t.row_bytes = PackedQ8RowBytes(a.k);
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
  const quant::PackedQ8Task* const task_list = tasks.data();
  const auto total = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t i = 0; i < total; ++i) {
    const Item& it = item_list[i];
    quant::PackedQ8RowsAvx512Vnni(task_list[it.task], it.n0, it.n1);
  }
}

void DequantPackedQ8Rows(const void* w, int64_t k, int64_t r0, int64_t rows, float* dst) {
  TANDEM_CHECK(Avx512Vnni() && "packed Q8_0 weights need AVX512-VNNI");
  quant::DequantPackedQ8Avx512(static_cast<const uint8_t*>(w), PackedQ8RowBytes(k), k, r0, rows,
                               dst);
}

void DequantPackedQ8RowsBf16(const void* w, int64_t k, int64_t r0, int64_t rows, uint16_t* dst) {
  TANDEM_CHECK(Avx512Vnni() && "packed Q8_0 weights need AVX512-VNNI");
  quant::DequantPackedQ8Bf16Avx512(static_cast<const uint8_t*>(w), PackedQ8RowBytes(k), k, r0,
                                   rows, dst);
}

}  // namespace tandem::ops::internal
