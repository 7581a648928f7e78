// Mixture-of-experts routing.
#ifndef TANDEM_CPU_WORKER_OPS_ROUTER_H_
#define TANDEM_CPU_WORKER_OPS_ROUTER_H_

#include <cstdint>

namespace tandem::ops {

// For each of n tokens: softmax over `experts` router logits (in f32), keep
// the top k (ties to the lower index, as torch.topk), optionally renormalise
// the kept weights to sum to one. ids/weights are [n, k], sorted by weight
// descending.
void RouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k, bool renormalize,
               int32_t* ids, float* weights);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_ROUTER_H_
