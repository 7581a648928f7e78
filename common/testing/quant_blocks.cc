#include "common/testing/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.h"

namespace tandem::testing {

std::pair<int, int> ScaleOffsets(ConvertedQuant t) {
  switch (t) {
    case ConvertedQuant::kQ5_0:
    case ConvertedQuant::kIQ4_NL:
    case ConvertedQuant::kIQ4_XS:
      return {0, -1};  // d, ...
    case ConvertedQuant::kQ5_1:
      return {0, 2};  // d, m, qh[4], qs[16]
    case ConvertedQuant::kQ2_K:
      return {80, 82};  // scales[16], qs[64], d, dmin
    case ConvertedQuant::kQ3_K:
      return {108, -1};  // hmask[32], qs[64], scales[12], d
    case ConvertedQuant::kQ4_K:
    case ConvertedQuant::kQ5_K:
      return {0, 2};  // d, dmin, scales[12], ...
    case ConvertedQuant::kQ6_K:
      return {208, -1};  // ql[128], qh[64], scales[16], d
  }
  return {-1, -1};
}

void PutF16At(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

std::vector<uint8_t> RandomQuantBlocks(ConvertedQuant t, int64_t n_blocks, float lo, float hi,
                                       std::mt19937& rng) {
  const int64_t bytes = ConvertedQuantBlockBytes(t);
  std::vector<uint8_t> b(static_cast<size_t>(n_blocks * bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& x : b) x = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution negative(0.3);
  const auto [d_off, m_off] = ScaleOffsets(t);
  for (int64_t k = 0; k < n_blocks; ++k) {
    uint8_t* p = b.data() + k * bytes;
    PutF16At(p + d_off, mag(rng) * (negative(rng) ? -1.0f : 1.0f));
    if (m_off >= 0) PutF16At(p + m_off, mag(rng) * (negative(rng) ? -1.0f : 1.0f));
  }
  return b;
}

std::vector<uint8_t> RandomQuantWeights(ConvertedQuant t, int64_t n_blocks, float max_abs,
                                        std::mt19937& rng) {
  // Largest |sub-scale x quant| of each layout (Q2_K: 15 x 3, Q3_K: 32 x 4,
  // Q4_K: 63 x 15, Q5_K: 63 x 31, Q6_K: 128 x 32, Q5_0: 16, Q5_1: 31, IQ4_NL: 127,
  // IQ4_XS: 127 x 32);
  // mins are bounded alike.
  float product = 1;
  switch (t) {
    case ConvertedQuant::kQ5_0:
      product = 16;
      break;
    case ConvertedQuant::kQ5_1:
      product = 31;
      break;
    case ConvertedQuant::kIQ4_NL:
      product = 127;
      break;
    case ConvertedQuant::kIQ4_XS:
      product = 127 * 32;
      break;
    case ConvertedQuant::kQ2_K:
      product = 45;
      break;
    case ConvertedQuant::kQ3_K:
      product = 128;
      break;
    case ConvertedQuant::kQ4_K:
      product = 945;
      break;
    case ConvertedQuant::kQ5_K:
      product = 1953;
      break;
    case ConvertedQuant::kQ6_K:
      product = 4096;
      break;
  }
  const float d = max_abs / product;
  return RandomQuantBlocks(t, n_blocks, 0.2f * d, d, rng);
}

namespace {

int RoundClamp(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
}

float F16Rounded(float v) { return F16ToF32(F32ToF16(v)); }

}  // namespace

std::vector<uint8_t> QuantizeQ4_K(const float* x, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(n / 256 * 144));
  for (int64_t k = 0; k < n / 256; ++k, x += 256) {
    uint8_t* b = out.data() + k * 144;
    float scale[8], minv[8];
    for (int j = 0; j < 8; ++j) {
      const float* s = x + 32 * j;
      const float lo = std::min(0.0f, *std::min_element(s, s + 32));
      const float hi = *std::max_element(s, s + 32);
      scale[j] = (hi - lo) / 15;
      minv[j] = -lo;
    }
    const float d = F16Rounded(*std::max_element(scale, scale + 8) / 63);
    const float dmin = F16Rounded(*std::max_element(minv, minv + 8) / 63);
    PutF16At(b, d);
    PutF16At(b + 2, dmin);
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = d > 0 ? RoundClamp(scale[j] / d, 0, 63) : 0;
      m[j] = dmin > 0 ? RoundClamp(minv[j] / dmin, 0, 63) : 0;
    }
    uint8_t* scales = b + 4;
    for (int j = 0; j < 4; ++j) {
      scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
      scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
      scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
    int q[256];
    for (int j = 0; j < 8; ++j) {
      const float step = d * sc[j], offset = dmin * m[j];
      for (int l = 0; l < 32; ++l) {
        q[32 * j + l] = step > 0 ? RoundClamp((x[32 * j + l] + offset) / step, 0, 15) : 0;
      }
    }
    uint8_t* qs = b + 16;
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
  }
  return out;
}

std::vector<uint8_t> QuantizeQ6_K(const float* x, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(n / 256 * 210));
  for (int64_t k = 0; k < n / 256; ++k, x += 256) {
    uint8_t* b = out.data() + k * 210;
    float scale[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      scale[j] = amax / 31;
    }
    const float d = F16Rounded(*std::max_element(scale, scale + 16) / 127);
    PutF16At(b + 208, d);
    auto* scales = reinterpret_cast<int8_t*>(b + 192);
    int q[256];
    for (int j = 0; j < 16; ++j) {
      const int sc = d > 0 ? RoundClamp(scale[j] / d, 0, 127) : 0;
      scales[j] = static_cast<int8_t>(sc);
      const float step = d * sc;
      for (int l = 0; l < 16; ++l) {
        q[16 * j + l] = (step > 0 ? RoundClamp(x[16 * j + l] / step, -32, 31) : 0) + 32;
      }
    }
    // The inverse of DequantQ6_K's layout: per 128 elements, ql[l] holds elements l and
    // l + 64, ql[l + 32] elements l + 32 and l + 96, qh[l] the four's high bits.
    for (int half = 0; half < 2; ++half) {
      uint8_t* ql = b + 64 * half;
      uint8_t* qh = b + 128 + 32 * half;
      const int* e = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((e[l] & 0xF) | ((e[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((e[l + 32] & 0xF) | ((e[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((e[l] >> 4) | ((e[l + 32] >> 4) << 2) |
                                     ((e[l + 64] >> 4) << 4) | ((e[l + 96] >> 4) << 6));
      }
    }
  }
  return out;
}

std::vector<uint8_t> QuantizeQ5_0(const float* x, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(n / 32 * 22));
  for (int64_t k = 0; k < n / 32; ++k, x += 32) {
    uint8_t* b = out.data() + k * 22;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0 ? 1 / d : 0;
    PutF16At(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int q1 = std::min(31, static_cast<int>(x[j + 16] * id + 16.5f));
      b[6 + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= ((static_cast<uint32_t>(q0) & 0x10u) >> 4) << j;
      qh |= ((static_cast<uint32_t>(q1) & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(b + 2, &qh, 4);
  }
  return out;
}

}  // namespace tandem::testing
