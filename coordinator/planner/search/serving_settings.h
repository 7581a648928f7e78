// What the workers execute of a planner Policy, as the serving settings the
// coordinator hands them (`tandem serve --policy FILE`): per layer the dense
// MLP rows computed on the CPU (CC) and the layers whose FFN weights are
// streamed (CG), the routed experts on the cpu_workers or in the GPU expert
// cache, Neo's CPU KV pool, n_g and the batch limits.
//
// Where the workers' unit is coarser than the policy's, the policy is
// rounded, and the rule is stated here:
//  - CC rows are whole blocks of 32 (GGUF blocks split only there), rounded
//    down;
//  - a layer's FFN is streamed whole or kept whole: streamed when its CG
//    share is at least its GG share;
//  - a MoE layer's routed experts on the CPU are round(cc * experts) of
//    them (the first ones: which is the cpu_worker's choice).
// A HOST_DEVICE policy (no GPU: the host device runs every layer) sets
// only the batch limits. A family whose schedule the workers do not run (MoE-Lightning's
// micro-batch pipeline, Klotski's n-batch pipeline) is refused with the
// reason: serving it under another schedule would not be that policy.
#ifndef TANDEM_COORDINATOR_PLANNER_SEARCH_SERVING_SETTINGS_H_
#define TANDEM_COORDINATOR_PLANNER_SEARCH_SERVING_SETTINGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "proto/policy.pb.h"

namespace tandem::planner {

// The service's KV block: the policy's kv_block_tokens must be this (or 0).
inline constexpr int64_t kServingKvBlockTokens = 16;

struct ServingSettings {
  // Per layer, dense MLP rows on the CPU; empty when there are none.
  std::vector<int64_t> cpu_ffn_rows;
  // Layers whose FFN weights stay in host memory and are streamed.
  std::vector<int64_t> streamed_ffn_layers;
  // --cpu-experts: "none", "all" (HybriMoE's per-step split),
  // "N-per-layer" or one count per layer "N0,N1,...".
  std::string cpu_experts = "none";
  int32_t expert_cache_slots = 0;  // per MoE layer; 0: no cache
  int64_t prefill_gpu_tokens = 0;  // ScheInfer's n_g
  // 0 where the policy leaves the service's default.
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t kv_blocks = 0;
  int64_t cpu_kv_blocks = 0;
};

// A policy from JSON: `tandem plan --json`'s report (its "best" policy) or
// a bare Policy message (proto field names). InvalidArgument on anything
// else, naming what is wrong.
absl::StatusOr<proto::Policy> ParsePolicyJson(const std::string& text);

// The settings that execute `p` for the model `c`: InvalidArgument when the
// policy does not fit the model (layer count, fractions), Unimplemented for
// a family the workers do not run.
absl::StatusOr<ServingSettings> SettingsFromPolicy(const proto::Policy& p, const ModelConfig& c);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SEARCH_SERVING_SETTINGS_H_
