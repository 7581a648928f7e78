#include "cpu_worker/ops/widened_linear.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "common/dtype.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/onednn_matmul.h"

namespace tandem::ops::internal {
namespace {

// Widened panels of about this many bytes stay in the cache while the GEMM
// reads them (the same size as the quantized weights' panels, quant_gemv.cc).
constexpr int64_t kPanelBytes = int64_t{4} << 20;

// bf16 -> f32 is exact: the bf16 bits are the f32's upper half.
__attribute__((target_clones("avx512f", "avx2", "default"))) void WidenBf16Range(
    const uint16_t* src, int64_t n, float* dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
  }
}

// f16 -> f32 is exact too (vcvtph2ps, or F16ToF32 without F16C).
__attribute__((target("avx,f16c"))) void WidenF16RangeF16c(const uint16_t* src, int64_t n,
                                                            float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = F16ToF32(src[i]);
}

void WidenRange(GemvWeight wt, bool f16c, const uint16_t* src, int64_t n, float* dst) {
  if (wt == GemvWeight::kBF16) {
    WidenBf16Range(src, n, dst);
  } else if (f16c) {
    WidenF16RangeF16c(src, n, dst);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(src[i]);
  }
}

}  // namespace

void WidenedLinear(const float* x, int64_t m, const uint16_t* w, GemvWeight wt, int64_t n,
                   int64_t k, const float* bias, float* y, int64_t panel_rows) {
  TANDEM_CHECK(m >= 0 && n > 0 && k > 0 && wt != GemvWeight::kF32);
  if (m == 0) return;
  const int64_t panel = std::min(
      n, panel_rows > 0 ? panel_rows : std::max<int64_t>(16, kPanelBytes / (k * 4)));
  thread_local std::vector<float> wbuf, ybuf;
  if (static_cast<int64_t>(wbuf.size()) < panel * k) wbuf.resize(static_cast<size_t>(panel * k));
  const bool whole = panel == n;  // one panel: the GEMM writes y directly
  if (!whole && static_cast<int64_t>(ybuf.size()) < m * panel) {
    ybuf.resize(static_cast<size_t>(m * panel));
  }
  // (Pointers, not the thread_locals, inside the parallel regions: there
  // each thread would see its own.)
  float* const wp = wbuf.data();
  float* const yp = ybuf.data();
  const bool f16c = HostCpuFeatures().f16c;
  for (int64_t n0 = 0; n0 < n; n0 += panel) {
    const int64_t np = std::min(panel, n - n0);
    constexpr int64_t kRows = 8;
#pragma omp parallel for schedule(static) if (np * k > (1 << 16))
    for (int64_t r0 = 0; r0 < np; r0 += kRows) {
      const int64_t rows = std::min(kRows, np - r0);
      WidenRange(wt, f16c, w + (n0 + r0) * k, rows * k, wp + r0 * k);
    }
    if (whole) {
      OnednnMatmul(x, m, wp, np, k, bias, MatmulType::kF32, y);
      return;
    }
    OnednnMatmul(x, m, wp, np, k, nullptr, MatmulType::kF32, yp);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < np; ++j) {
        y[i * n + n0 + j] = yp[i * np + j] + (bias != nullptr ? bias[n0 + j] : 0.0f);
      }
    }
  }
}

}  // namespace tandem::ops::internal
