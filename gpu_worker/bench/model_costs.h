// The work of the engine's steps in bytes and FLOPs — the numerators of the
// rooflines `tandem bench` compares its figures with. Weight bytes are
// those of the loaded weights as the kernels read them (LinearWeight::
// nbytes: bf16 in place, f32 after a conversion, GGUF blocks), so the
// bandwidth roofline is the time it takes to stream exactly what a step
// touches; KV bytes are the engine's f32 cache.
#ifndef TANDEM_GPU_WORKER_BENCH_MODEL_COSTS_H_
#define TANDEM_GPU_WORKER_BENCH_MODEL_COSTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "gpu_worker/engine/model_weights.h"

namespace tandem::bench {

struct ModelCosts {
  int64_t total_params = 0;        // every stored tensor's elements
  int64_t total_weight_bytes = 0;  // as stored in the checkpoint
  // Matrices every token goes through (attention projections, dense MLPs,
  // routers, shared experts), without the LM head.
  int64_t dense_params = 0;
  int64_t dense_bytes = 0;
  int64_t lm_head_params = 0;  // run for the rows whose logits are wanted
  int64_t lm_head_bytes = 0;
  int64_t expert_params = 0;  // one routed expert: gate + up + down
  int64_t expert_bytes = 0;
  int64_t moe_layers = 0;
  int64_t num_experts = 0;
  int64_t experts_per_tok = 0;
  int64_t kv_bytes_per_token = 0;  // K and V of one position, all layers (f32)
  int64_t attn_flops_per_key = 0;  // one query against one key, all layers (QK and PV)
  int64_t embed_row_bytes = 0;     // one token's embedding lookup
  std::string weight_storage;      // of the linear weights: f32, bf16, q8_0, q4_0, q4_1
};

absl::StatusOr<ModelCosts> ComputeModelCosts(const Checkpoint& ckpt, const ModelWeights& w);

// FLOPs and bytes of one piece of work.
struct Work {
  double flops = 0;
  double bytes = 0;
  // The part of flops in routed experts: they may run on another kernel
  // than the rest (a few rows each, where the batch has many).
  double expert_flops = 0;
};

// A fresh sequence's prefill of n tokens in one step (logits of the last
// row only). `experts_read`: distinct routed experts, summed over layers,
// whose weights the step reads.
Work PrefillWork(const ModelCosts& c, int64_t n, double experts_read);

// One decode step of `batch` sequences, each one token attending over
// `keys` cached keys (its own included).
Work DecodeWork(const ModelCosts& c, int64_t batch, double keys, double experts_read);

// Expected distinct experts of one layer when `tokens` tokens each route to
// k of E experts uniformly at random: E * (1 - (1 - k/E)^tokens).
double ExpectedDistinctExperts(int64_t experts, int64_t k, int64_t tokens);

// The best time the machine allows for `work`: the slower of streaming its
// bytes at `bandwidth_gbs` and computing its FLOPs at `peak_gflops`, its
// expert FLOPs at `expert_peak_gflops` where that is given (> 0).
struct Roofline {
  double memory_seconds = 0;
  double compute_seconds = 0;
  double seconds() const {
    return memory_seconds > compute_seconds ? memory_seconds : compute_seconds;
  }
  const char* bound() const { return memory_seconds >= compute_seconds ? "memory" : "compute"; }
};
Roofline RooflineOf(const Work& work, double bandwidth_gbs, double peak_gflops,
                    double expert_peak_gflops = 0);

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_MODEL_COSTS_H_
