// Token sampling from logits.
#ifndef TANDEM_CPU_WORKER_OPS_SAMPLING_H_
#define TANDEM_CPU_WORKER_OPS_SAMPLING_H_

#include <cstdint>
#include <random>
#include <vector>

namespace tandem::ops {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = all
  float top_p = 1.0f;        // 1 = all
  uint64_t seed = 0;
};

// Per-sequence sampler; the seed makes a run reproducible.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}
  // Picks a token from logits [vocab]. Greedy takes the lowest index among
  // equal maxima. Temperature scales, then top-k, then top-p (smallest set
  // whose probability reaches p), then one draw.
  int32_t Sample(const float* logits, int64_t vocab);
  // Restarts the random stream. Generation reseeds with TokenSeed() before
  // each token, so a draw depends only on (seed, token index, logits) —
  // the same in `tandem generate` and in the service, whatever the batching
  // and after a preempted request is recomputed.
  void Reseed(uint64_t seed) { rng_.seed(seed); }
  // New parameters, keeping the scratch buffers (one sampler serves many
  // sequences in a worker without allocating per token).
  void Reset(const SamplingParams& p) {
    params_ = p;
    rng_.seed(p.seed);
  }

 private:
  // Uniform double in [0, 1) from 53 bits of the generator.
  double Uniform();
  // One draw from unnormalised weights [n].
  int32_t Draw(const float* weights, int64_t n);
  // Fills scratch_ with the top-p nucleus of weights_ (unordered).
  void TopP();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;  // candidates (weight, token)
  std::vector<float> weights_;                      // [vocab] exp(logit / T - max)
};

// Seed of the draw of a request's index-th generated token (splitmix64 mix).
uint64_t TokenSeed(uint64_t request_seed, int64_t index);

// log_softmax(logits)[token] computed in double for stability.
float LogProb(const float* logits, int64_t vocab, int32_t token);

// Index of the largest logit (lowest index among ties); NaNs are skipped, and a
// row of NaNs only gives 0.
int32_t ArgMax(const float* logits, int64_t vocab);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_SAMPLING_H_
