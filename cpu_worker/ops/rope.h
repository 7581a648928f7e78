// Rotary position embedding.
#ifndef TANDEM_CPU_WORKER_OPS_ROPE_H_
#define TANDEM_CPU_WORKER_OPS_ROPE_H_

#include <cstdint>
#include <vector>

#include "common/model_config.h"

namespace tandem::ops {

// Inverse frequencies [rotary_dim / 2] for theta and scaling (linear, llama3),
// computed as Hugging Face's rope initialisation functions do.
std::vector<float> RopeInvFreq(int64_t rotary_dim, float theta, const RopeScaling& scaling);

// Rotates x [n_tokens, n_heads, head_dim] in place; token t is at positions[t].
// kNeox pairs (i, i + head_dim/2); kInterleaved pairs (2i, 2i+1).
// cos/sin are computed in f32 from position * inv_freq as HF does.
void ApplyRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               const int64_t* positions, const std::vector<float>& inv_freq, RopeStyle style);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_ROPE_H_
