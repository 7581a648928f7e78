#include "cpu_worker/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/status_macros.h"
#include "cpu_worker/ops/vec_math.h"

namespace tandem::ops {
namespace {

// Prefill (n > 1): one query head against keys 0 .. len-1 of kv head
// `kvh`. `scores` has room for `len` floats. out [head_dim].
__attribute__((target_clones("avx512f", "avx2", "default"))) void AttendOneHead(
    const float* q, const PagedKvLayer& kv, const int32_t* block_table, int64_t kvh, int64_t len,
    float scale, float* scores, float* out) {
  const int64_t hd = kv.head_dim;
  const int64_t bs = kv.block_size;
  const int64_t row_stride = kv.kv_heads * hd;  // between token slots
  const int64_t num_blocks = (len + bs - 1) / bs;

  // Pass 1: scores and their maximum.
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < num_blocks; ++b) {
    const int64_t first = b * bs;
    const int64_t count = std::min(bs, len - first);
    const float* kb = kv.k + static_cast<int64_t>(block_table[b]) * bs * row_stride + kvh * hd;
    for (int64_t s = 0; s < count; ++s) {
      const float* kr = kb + s * row_stride;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < hd; ++d) dot += q[d] * kr[d];
      const float sc = dot * scale;
      scores[first + s] = sc;
      max_score = std::max(max_score, sc);
    }
  }

  // Pass 2: exp(score - max) and the sum.
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < len; ++j) {
    const float p = internal::ExpApprox(scores[j] - max_score);
    scores[j] = p;
    sum += p;
  }

  // Pass 3: weighted sum of values.
  for (int64_t d = 0; d < hd; ++d) out[d] = 0.0f;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const int64_t first = b * bs;
    const int64_t count = std::min(bs, len - first);
    const float* vb = kv.v + static_cast<int64_t>(block_table[b]) * bs * row_stride + kvh * hd;
    for (int64_t s = 0; s < count; ++s) {
      const float* vr = vb + s * row_stride;
      const float p = scores[first + s];
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) out[d] += p * vr[d];
    }
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

}  // namespace

void WriteKv(const PagedKvLayer& kv, const int32_t* block_table, int64_t first_pos, int64_t n,
             const float* k, const float* v) {
  TANDEM_CHECK(kv.block_size > 0 && kv.kv_heads > 0 && kv.head_dim > 0);
  TANDEM_CHECK(first_pos >= 0 && n >= 0);
  const int64_t row = kv.kv_heads * kv.head_dim;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = first_pos + t;
    const int64_t block = block_table[pos / kv.block_size];
    TANDEM_CHECK(block >= 0);
    const int64_t slot = block * kv.block_size + pos % kv.block_size;
    std::memcpy(kv.k + slot * row, k + t * row, static_cast<size_t>(row) * sizeof(float));
    std::memcpy(kv.v + slot * row, v + t * row, static_cast<size_t>(row) * sizeof(float));
  }
}

void AttendSequence(const float* q, int64_t n, int64_t heads, const PagedKvLayer& kv,
                    const int32_t* block_table, int64_t first_pos, float scale, float* out) {
  TANDEM_CHECK(kv.block_size > 0 && kv.kv_heads > 0 && kv.head_dim > 0);
  TANDEM_CHECK(heads > 0 && heads % kv.kv_heads == 0);
  TANDEM_CHECK(first_pos >= 0 && n >= 0);
  if (n == 1) {
    // Decode: the flash-decoding path reads each K/V row once per group.
    const DecodeQuery dq{q, block_table, first_pos + 1, out};
    AttendDecode(&dq, 1, heads, kv, scale);
    return;
  }
  const int64_t hd = kv.head_dim;
  const int64_t group = heads / kv.kv_heads;
  const int64_t tasks = n * heads;
  // Rough flop count decides whether threads pay off.
  const int64_t work = n * heads * (first_pos + n) * hd;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && work > (1 << 16))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t t = task / heads;
    const int64_t h = task % heads;
    const int64_t len = first_pos + t + 1;
    thread_local std::vector<float> scores;
    if (static_cast<int64_t>(scores.size()) < len) scores.resize(static_cast<size_t>(len));
    AttendOneHead(q + task * hd, kv, block_table, h / group, len, scale, scores.data(),
                  out + task * hd);
  }
}

void ReferenceAttention(const float* q, int64_t n, int64_t heads, const float* k, const float* v,
                        int64_t kv_heads, int64_t head_dim, int64_t first_pos, float scale,
                        float* out) {
  const int64_t group = heads / kv_heads;
  std::vector<double> s;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t len = first_pos + t + 1;
    s.assign(static_cast<size_t>(len), 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      const float* qv = q + (t * heads + h) * head_dim;
      const int64_t kvh = h / group;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < len; ++j) {
        const float* kr = k + (j * kv_heads + kvh) * head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qv[d]) * kr[d];
        s[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < len; ++j) {
        s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
        sum += s[static_cast<size_t>(j)];
      }
      float* o = out + (t * heads + h) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < len; ++j) {
          acc += s[static_cast<size_t>(j)] * v[(j * kv_heads + kvh) * head_dim + d];
        }
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace tandem::ops
