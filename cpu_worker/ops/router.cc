#include "cpu_worker/ops/router.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/status_macros.h"

namespace tandem::ops {

void RouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k, bool renormalize,
               int32_t* ids, float* weights) {
  TANDEM_CHECK(n >= 0 && experts > 0 && k > 0 && k <= experts);
  thread_local std::vector<float> probs;
  thread_local std::vector<int32_t> order;
  probs.resize(static_cast<size_t>(experts));
  order.resize(static_cast<size_t>(experts));
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * experts;
    // softmax(router_logits, dtype=float): max subtraction, f32 exp and sum.
    float mx = l[0];
    for (int64_t e = 1; e < experts; ++e) mx = std::max(mx, l[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < experts; ++e) {
      probs[static_cast<size_t>(e)] = std::exp(l[e] - mx);
      sum += probs[static_cast<size_t>(e)];
    }
    for (int64_t e = 0; e < experts; ++e) probs[static_cast<size_t>(e)] /= sum;
    // Top-k on the probabilities; equal probabilities keep the lower index.
    for (int64_t e = 0; e < experts; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [](int32_t a, int32_t b) {
      const float pa = probs[static_cast<size_t>(a)], pb = probs[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    float kept = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      kept += probs[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      const float p = probs[static_cast<size_t>(e)];
      ids[t * k + j] = e;
      weights[t * k + j] = renormalize ? p / kept : p;
    }
  }
}

}  // namespace tandem::ops
