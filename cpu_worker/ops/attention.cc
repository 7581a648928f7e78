#include "cpu_worker/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/status_macros.h"

namespace tandem::ops {

void WriteKv(const PagedKvLayer& kv, const int32_t* block_table, int64_t first_pos, int64_t n,
             const float* k, const float* v) {
  TANDEM_CHECK(kv.block_size > 0 && kv.kv_heads > 0 && kv.head_dim > 0);
  TANDEM_CHECK(first_pos >= 0 && n >= 0);
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = first_pos + t;
    TANDEM_CHECK(block_table[pos / bs] >= 0);
    for (int64_t h = 0; h < kv.kv_heads; ++h) {
      const int64_t from = (t * kv.kv_heads + h) * hd;
      float* kt = kv.k + KeyOffset(kv, block_table, pos, h);
      for (int64_t d = 0; d < hd; ++d) kt[d * bs] = k[from + d];
      std::memcpy(kv.v + ValueRowOffset(kv, block_table, pos, h), v + from,
                  static_cast<size_t>(hd) * sizeof(float));
    }
  }
}

void AttendSequence(const float* q, int64_t n, int64_t heads, const PagedKvLayer& kv,
                    const int32_t* block_table, int64_t first_pos, float scale, float* out) {
  TANDEM_CHECK(kv.block_size > 0 && kv.kv_heads > 0 && kv.head_dim > 0);
  TANDEM_CHECK(heads > 0 && heads % kv.kv_heads == 0);
  TANDEM_CHECK(first_pos >= 0 && n >= 0);
  // Query t is a decode query over keys 0 .. first_pos + t, so
  // the flash-decoding kernel serves it too — each K/V row read once for
  // all query heads of its group (not once per head), the context split
  // across threads — and a token's attention is the same bits whether it
  // came in a prefill or a decode step (a query's chunks depend on its
  // length only).
  const int64_t row = heads * kv.head_dim;
  thread_local std::vector<DecodeQuery> queries;
  queries.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    queries[static_cast<size_t>(t)] = {q + t * row, block_table, first_pos + t + 1, out + t * row};
  }
  AttendDecode(queries.data(), n, heads, kv, scale);
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
