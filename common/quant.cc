#include "common/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/status_macros.h"

namespace tandem {

void ConvertToF32(DType t, const void* src, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[k * 32 + j] = d * b[k].qs[j];
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * ((b[k].qs[j] & 0x0f) - 8);
          dst[k * 32 + j + 16] = d * ((b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        const float m = F16ToF32(b[k].m);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * (b[k].qs[j] & 0x0f) + m;
          dst[k * 32 + j + 16] = d * (b[k].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case DType::kI32: {
      const auto* s = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
  }
  TANDEM_CHECK(false && "unknown dtype");
}

void QuantizeFromF32(DType t, const float* src, int64_t n, void* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float* x = src + k * 32;
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b[k].d = F32ToF16(d);
        for (int j = 0; j < 32; ++j) b[k].qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float* x = src + k * 32;
        float amax = 0, maxv = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            maxv = x[j];
          }
        }
        const float d = maxv / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b[k].d = F32ToF16(d);
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
          b[k].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::kQ4_1: {
      auto* b = static_cast<BlockQ4_1*>(dst);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float* x = src + k * 32;
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; ++j) {
          lo = std::min(lo, x[j]);
          hi = std::max(hi, x[j]);
        }
        const float d = (hi - lo) / 15.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b[k].d = F32ToF16(d);
        b[k].m = F32ToF16(lo);
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
          const int q1 = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
          b[k].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::kI32:
      break;
  }
  TANDEM_CHECK(false && "cannot quantize to this dtype");
}

}  // namespace tandem
