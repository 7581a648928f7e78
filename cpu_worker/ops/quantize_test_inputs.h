// Activations that are hard to quantize per block of 32, for the tests of
// the int8 kernels' activation quantization (QuantizeBlock and its SIMD
// forms): each block is, at random, normal values, all zeros, normal values
// scaled by 2^-30 .. 2^30, or halves with a largest |x| of 127 (so that
// d = 1 and x / d falls exactly between two integers, where rounding must go
// to even). Internal to the ops tests.
#ifndef TANDEM_CPU_WORKER_OPS_QUANTIZE_TEST_INPUTS_H_
#define TANDEM_CPU_WORKER_OPS_QUANTIZE_TEST_INPUTS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tandem::ops {

// k values (a multiple of 32).
inline std::vector<float> HardToQuantize(std::mt19937& rng, int64_t k) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 4), half(-254, 254);
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
  std::vector<float> x(static_cast<size_t>(k));
  for (auto& v : x) v = normal(rng);
  for (int64_t b = 0; b < k / 32; ++b) {
    float* block = x.data() + 32 * b;
    switch (kind(rng)) {
      case 0:
        std::fill(block, block + 32, 0.0f);
        break;
      case 1: {
        const float scale = std::exp2(exponent(rng));
        for (int j = 0; j < 32; ++j) block[j] *= scale;
        break;
      }
      case 2:
        for (int j = 0; j < 32; ++j)
          block[j] = 0.5f * static_cast<float>(half(rng));
        block[b % 32] = b % 2 == 0 ? 127.0f : -127.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_QUANTIZE_TEST_INPUTS_H_
