#include "cpu_worker/ops/quant_gemv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/quant.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/amx_linear.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/onednn_matmul.h"
#include "cpu_worker/ops/quant_packed.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::ops::internal {
namespace {

using quant::Act256;
using quant::Act512;
using quant::ActScalar;
using quant::kBlock;
using quant::QuantizeBlock;

// Dequantized panel size for QuantLinearViaGemm: 4 MiB measured a little
// faster than 1 MiB at m = 64 and 512 (linear_bench, BM_QuantPath).
constexpr int64_t kPanelBytes = int64_t{4} << 20;

void PrepRow512(const float* x, int64_t k, DType t, Act512* out) {
  const int64_t nb = k / kBlock;
  const int64_t pairs = (nb + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    Act512& a = out[p];
    std::memset(&a, 0, sizeof(a));
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * p + h;
      if (b >= nb) break;
      int8_t q[kBlock];
      int32_t s[8];
      const float d = quant::QuantizeBlockAvx512(x + b * kBlock, q, s);
      // Lane index of block-lane l (elements 4l .. 4l+3) in the pair.
      int lane[8];
      if (t == DType::kQ8_0) {
        std::memcpy(a.q + 32 * h, q, 32);
        for (int l = 0; l < 8; ++l) lane[l] = 8 * h + l;
      } else {
        std::memcpy(a.q + 16 * h, q, 16);
        std::memcpy(a.q + 32 + 16 * h, q + 16, 16);
        for (int l = 0; l < 8; ++l) lane[l] = (l < 4 ? 4 * h + l : 8 + 4 * h + (l - 4));
      }
      for (int l = 0; l < 8; ++l) {
        a.xs[lane[l]] = d;
        switch (t) {
          case DType::kQ8_0:
            a.c.i[lane[l]] = -128 * s[l];
            break;
          case DType::kQ4_0:
            a.c.i[lane[l]] = -8 * s[l];
            break;
          default:
            a.c.f[lane[l]] = d * static_cast<float>(s[l]);
            break;
        }
      }
    }
  }
}

void PrepRow256(const float* x, int64_t k, DType t, Act256* out) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    Act256& a = out[b];
    std::memset(&a, 0, sizeof(a));
    int32_t s[8];
    a.xs = quant::QuantizeBlockAvx2(x + b * kBlock, a.q, s);
    if (t == DType::kQ8_0) continue;  // the kernel takes signed products directly
    for (int l = 0; l < 8; ++l) {
      if (t == DType::kQ4_0) {
        a.c.i[l] = -8 * s[l];
      } else {
        a.c.f[l] = a.xs * static_cast<float>(s[l]);
      }
    }
  }
}

void PrepRowScalar(const float* x, int64_t k, ActScalar* out) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    ActScalar& a = out[b];
    a.xs = QuantizeBlock(x + b * kBlock, a.q);
    a.sum = 0;
    for (int j = 0; j < kBlock; ++j) a.sum += a.q[j];
  }
}

// Grows `v` to at least `bytes` and returns a 64-byte aligned pointer in it.
uint8_t* Aligned(std::vector<uint8_t>& v, size_t bytes) {
  if (v.size() < bytes + 64) v.resize(bytes + 64);
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - p % 64) % 64);
}

}  // namespace

namespace quant {

// The portable kernel: integer dot product per block, scaled in f32.
void RowsScalar(const Task& t, int64_t n0, int64_t n1) {
  const auto* acts = static_cast<const ActScalar*>(t.acts);
  const int64_t nb = t.k / kBlock;
  for (int64_t j = n0; j < n1; ++j) {
    const uint8_t* row = t.w + j * t.row_bytes;
    const float bias = t.bias != nullptr ? t.bias[j] : 0.0f;
    for (int64_t i = 0; i < t.m; ++i) {
      const ActScalar* a = acts + i * t.act_stride;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        if (t.t == DType::kQ8_0) {
          const auto* wb = reinterpret_cast<const BlockQ8_0*>(row) + b;
          for (int e = 0; e < kBlock; ++e) isum += wb->qs[e] * a[b].q[e];
          acc += F16ToF32(wb->d) * a[b].xs * static_cast<float>(isum);
        } else if (t.t == DType::kQ4_0) {
          const auto* wb = reinterpret_cast<const BlockQ4_0*>(row) + b;
          for (int e = 0; e < 16; ++e) {
            isum += (wb->qs[e] & 0x0f) * a[b].q[e] + (wb->qs[e] >> 4) * a[b].q[e + 16];
          }
          isum -= 8 * a[b].sum;
          acc += F16ToF32(wb->d) * a[b].xs * static_cast<float>(isum);
        } else {
          const auto* wb = reinterpret_cast<const BlockQ4_1*>(row) + b;
          for (int e = 0; e < 16; ++e) {
            isum += (wb->qs[e] & 0x0f) * a[b].q[e] + (wb->qs[e] >> 4) * a[b].q[e + 16];
          }
          acc += F16ToF32(wb->d) * a[b].xs * static_cast<float>(isum) +
                 F16ToF32(wb->m) * a[b].xs * static_cast<float>(a[b].sum);
        }
      }
      t.y[i * t.n + j] = acc + bias;
    }
  }
}

}  // namespace quant

void QuantLinear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                 const float* bias, float* y, KernelIsa isa) {
  TANDEM_CHECK(t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1);
  TANDEM_CHECK(m >= 0 && n > 0 && k > 0 && k % kBlock == 0);
  TANDEM_CHECK(isa <= MaxKernelIsa() || isa == KernelIsa::kScalar);
  if (m == 0) return;
  const int64_t nb = k / kBlock;

  quant::Task task;
  task.w = static_cast<const uint8_t*>(w);
  task.row_bytes = nb * DTypeBlockBytes(t);
  task.t = t;
  task.m = m;
  task.n = n;
  task.k = k;
  task.odd_blocks = nb % 2 != 0;
  task.bias = bias;
  task.y = y;

  // The activations, quantized once per call into this thread's scratch
  // (read by all the OpenMP threads below).
  thread_local std::vector<uint8_t> scratch;
  void (*rows)(const quant::Task&, int64_t, int64_t) = nullptr;
  const bool parallel_prep = m * k > (1 << 16);
  if (isa == KernelIsa::kAvx512Vnni) {
    task.groups = task.act_stride = (nb + 1) / 2;
    auto* acts = reinterpret_cast<Act512*>(
        Aligned(scratch, static_cast<size_t>(m * task.act_stride) * sizeof(Act512)));
#pragma omp parallel for schedule(static) if (parallel_prep)
    for (int64_t i = 0; i < m; ++i) PrepRow512(x + i * k, k, t, acts + i * task.act_stride);
    task.acts = acts;
    rows = quant::RowsAvx512Vnni;
  } else if (isa >= KernelIsa::kAvx2) {
    task.groups = task.act_stride = nb;
    auto* acts = reinterpret_cast<Act256*>(
        Aligned(scratch, static_cast<size_t>(m * task.act_stride) * sizeof(Act256)));
#pragma omp parallel for schedule(static) if (parallel_prep)
    for (int64_t i = 0; i < m; ++i) PrepRow256(x + i * k, k, t, acts + i * task.act_stride);
    task.acts = acts;
    rows = quant::RowsAvx2;
  } else {
    task.groups = task.act_stride = nb;
    auto* acts = reinterpret_cast<ActScalar*>(
        Aligned(scratch, static_cast<size_t>(m * task.act_stride) * sizeof(ActScalar)));
#pragma omp parallel for schedule(static) if (parallel_prep)
    for (int64_t i = 0; i < m; ++i) PrepRowScalar(x + i * k, k, acts + i * task.act_stride);
    task.acts = acts;
    rows = quant::RowsScalar;
  }

  // Blocks of weight rows: enough blocks to balance the threads, each large
  // enough that its overhead is negligible; multiples of the kernels' 8 rows.
  // Handed out dynamically, so that a thread that loses a time slice on a
  // shared machine does not hold the others at the barrier (each output is
  // one block's, so the sums do not depend on the schedule).
  // Where the AVX-512 kernel streams the weight a row at a time, about
  // 1 MiB per block, so that a thread's stream seldom jumps.
  constexpr int64_t kRows = 32;
  const bool parallel = n * k * std::min<int64_t>(m, 8) > (1 << 17);
  const bool stream = isa == KernelIsa::kAvx512Vnni && m <= quant::kAvx512StreamMaxRows;
  const int64_t block_rows =
      stream ? StreamItemRows(n, task.row_bytes, kRows, parallel) / 8 * 8 : kRows;
  const int64_t blocks = (n + block_rows - 1) / block_rows;
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    rows(task, b * block_rows, std::min(n, (b + 1) * block_rows));
  }
}

void QuantizeActivationsReference(const float* x, int64_t k, float* x_hat) {
  TANDEM_CHECK(k % kBlock == 0);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    int8_t q[kBlock];
    const float d = QuantizeBlock(x + b * kBlock, q);
    for (int j = 0; j < kBlock; ++j) x_hat[b * kBlock + j] = d * static_cast<float>(q[j]);
  }
}

bool QuantLinearUsesGemv(int64_t m) {
  // CpuHasBf16 reads the environment: not on the decode path.
  if (AmxUsable()) return m <= kQuantGemvMaxRowsAmx;
  return m <= kQuantGemvMaxRowsBf16 || (m <= kQuantGemvMaxRowsF32 && !CpuHasBf16());
}

void QuantLinearViaGemm(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                        const float* bias, float* y, int64_t panel_rows, bool packed) {
  TANDEM_CHECK(DTypeIsQuantized(t) && m >= 0 && n > 0 && k > 0 && k % kBlock == 0);
  if (m == 0) return;
  const bool bf16 = CpuHasBf16();
  const bool avx2 = MaxKernelIsa() >= KernelIsa::kAvx2;
  const int64_t elem = bf16 ? 2 : 4;
  const int64_t row_bytes = packed ? PackedQuantRowBytes(t, k) : k / kBlock * DTypeBlockBytes(t);
  // Panels of about kPanelBytes of dequantized weights (they stay in the
  // cache while the GEMM reads them), at least 64 rows.
  const int64_t panel =
      std::min(n, panel_rows > 0 ? panel_rows : std::max<int64_t>(64, kPanelBytes / (k * elem)));
  thread_local std::vector<uint8_t> wbuf, xbuf;
  thread_local std::vector<float> ybuf;
  if (static_cast<int64_t>(wbuf.size()) < panel * k * elem) {
    wbuf.resize(static_cast<size_t>(panel * k * elem));
  }
  if (static_cast<int64_t>(ybuf.size()) < m * panel) ybuf.resize(static_cast<size_t>(m * panel));
  const void* xin = x;
  if (bf16) {
    if (static_cast<int64_t>(xbuf.size()) < m * k * 2) xbuf.resize(static_cast<size_t>(m * k * 2));
    auto* xb = reinterpret_cast<uint16_t*>(xbuf.data());
#pragma omp parallel for schedule(static) if (m * k > (1 << 16))
    for (int64_t i = 0; i < m * k; ++i) xb[i] = F32ToBf16(x[i]);
    xin = xb;
  }
  // (Pointers, not the thread_locals, inside the parallel regions: there
  // each thread would see its own.)
  uint8_t* const wp = wbuf.data();
  float* const yp = ybuf.data();
  const auto* wq = static_cast<const uint8_t*>(w);
  for (int64_t n0 = 0; n0 < n; n0 += panel) {
    const int64_t np = std::min(panel, n - n0);
    constexpr int64_t kRows = 8;
#pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < np; r0 += kRows) {
      const int64_t rows = std::min(kRows, np - r0);
      const uint8_t* src = wq + (n0 + r0) * row_bytes;
      if (packed && bf16) {
        DequantPackedQuantRowsBf16(t, wq, k, n0 + r0, rows,
                                   reinterpret_cast<uint16_t*>(wp) + r0 * k);
      } else if (packed) {
        DequantPackedQuantRows(t, wq, k, n0 + r0, rows, reinterpret_cast<float*>(wp) + r0 * k);
      } else if (bf16) {
        quant::DequantRowsBf16Avx512(t, src, row_bytes, rows, k,
                                     reinterpret_cast<uint16_t*>(wp) + r0 * k);
      } else if (avx2) {
        quant::DequantRowsF32Avx2(t, src, row_bytes, rows, k,
                                  reinterpret_cast<float*>(wp) + r0 * k);
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          ConvertToF32(t, src + r * row_bytes, k, reinterpret_cast<float*>(wp) + (r0 + r) * k);
        }
      }
    }
    OnednnMatmul(xin, m, wp, np, k, nullptr, bf16 ? MatmulType::kBF16 : MatmulType::kF32, yp);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < np; ++j) {
        y[i * n + n0 + j] = yp[i * np + j] + (bias != nullptr ? bias[n0 + j] : 0.0f);
      }
    }
  }
}

}  // namespace tandem::ops::internal
