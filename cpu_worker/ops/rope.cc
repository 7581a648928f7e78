#include "cpu_worker/ops/rope.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "common/status_macros.h"

// Every expression here is evaluated in f32 in the order transformers
// evaluates it. The file is compiled with -ffp-contract=off: fused a*b+c
// would differ from torch's results by an ulp now and then.

namespace tandem::ops {
namespace {

// transformers' default initialisation:
//   inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
// computed on f32 tensors: the exponent is an f32 division, the power an f32
// result (computed here in double and rounded once), `1.0 / t` is
// t.reciprocal() * 1.0 in f32.
std::vector<float> DefaultInvFreq(int64_t dim, float theta) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  const float fdim = static_cast<float>(dim);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / fdim;
    const float p =
        static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(e)));
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }
  return inv;
}

// transformers' _compute_llama3_parameters, operation by operation. Python
// scalars meet f32 tensors, so each is rounded to f32 first; `s / t` on a
// tensor is t.reciprocal() * s.
void ApplyLlama3(const RopeScaling& sc, std::vector<float>& inv) {
  const float factor = sc.factor;
  const float low_freq_factor = sc.low_freq_factor;
  const double old_context_len = static_cast<double>(sc.original_max_position);
  const float low_freq_wavelen =
      static_cast<float>(old_context_len / static_cast<double>(sc.low_freq_factor));
  const float high_freq_wavelen =
      static_cast<float>(old_context_len / static_cast<double>(sc.high_freq_factor));
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float f_old_context_len = static_cast<float>(old_context_len);
  const float factor_span = static_cast<float>(static_cast<double>(sc.high_freq_factor) -
                                               static_cast<double>(sc.low_freq_factor));
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    float llama = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = ((1.0f / wavelen) * f_old_context_len - low_freq_factor) / factor_span;
    const float t1 = (1.0f - smooth) * llama;
    const float t2 = t1 / factor;
    const float t3 = smooth * llama;
    const float smoothed = t2 + t3;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) llama = smoothed;
    f = llama;
  }
}

}  // namespace

std::vector<float> RopeInvFreq(int64_t rotary_dim, float theta, const RopeScaling& scaling) {
  TANDEM_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0);
  std::vector<float> inv = DefaultInvFreq(rotary_dim, theta);
  switch (scaling.type) {
    case RopeScaling::Type::kNone:
      break;
    case RopeScaling::Type::kLinear:
      for (float& f : inv) f = f / scaling.factor;
      break;
    case RopeScaling::Type::kLlama3:
      ApplyLlama3(scaling, inv);
      break;
  }
  return inv;
}

void ApplyRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               const int64_t* positions, const std::vector<float>& inv_freq, RopeStyle style) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  // Partial rotary embeddings rotate the first 2 * half dims of each head.
  TANDEM_CHECK(half > 0 && 2 * half <= head_dim);
#pragma omp parallel for schedule(static) if (n_tokens * n_heads * head_dim > (1 << 16))
  for (int64_t t = 0; t < n_tokens; ++t) {
    thread_local std::vector<float> cs;
    if (static_cast<int64_t>(cs.size()) < 2 * half) cs.resize(static_cast<size_t>(2 * half));
    float* cos_v = cs.data();
    float* sin_v = cs.data() + half;
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float freq = pos * inv_freq[static_cast<size_t>(i)];
      cos_v[i] = std::cos(freq);
      sin_v[i] = std::sin(freq);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      if (style == RopeStyle::kNeox) {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          // q * cos + rotate_half(q) * sin, rotate_half = cat(-x2, x1).
          v[i] = a * cos_v[i] + (-b) * sin_v[i];
          v[i + half] = b * cos_v[i] + a * sin_v[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cos_v[i] + (-b) * sin_v[i];
          v[2 * i + 1] = b * cos_v[i] + a * sin_v[i];
        }
      }
    }
  }
}

}  // namespace tandem::ops
