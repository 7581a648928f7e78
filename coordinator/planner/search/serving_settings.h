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
// only the batch limits.
//
// MoE-Lightning (CGOPipe): its shares as above (r_w's resident part GG, the
// rest streamed; with FFN on the CPU, CC), micro-batches of mu sequences
// when N holds more than one, and with attention on the CPU every
// request's KV on the CPU pool. The workers pipeline the micro-batches
// within a layer (the CPU attention of one overlaps the device's work on
// its neighbours), not across layers as the paper's "two ahead".
//
// Klotski: the n batches of a step are one step's batch (n * batch size
// sequences), so each layer's weights are loaded once for all of them; its
// experts go through the GPU expert cache with no CPU share: K hot experts
// per layer (at least one slot), K prefetched per layer from the
// transition table, the other activated experts copied in in turn and
// computed on the device. Its KV goes to the CPU pool when the policy
// places it there.
//
// Neo: the CPU KV pool, and when the policy pipelines two sub-batches,
// the per-step sub-batch rule (--neo-sub-batches). HybriMoE: its cache.
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
  int64_t micro_batch_size = 0;  // MoE-Lightning's mu; 0: one micro-batch
  std::string kv_pool = "auto";  // --kv-pool: "cpu" puts every request's KV there
  bool gpu_experts_only = false;  // Klotski: the cache's experts all on the device
  int32_t expert_prefetch = 0;    // experts prefetched per layer; 0: the default
  bool neo_sub_batches = false;   // Neo's two asymmetric sub-batches per step
};

// A policy from JSON: `tandem plan --json`'s report (its "best" policy) or
// a bare Policy message (proto field names). InvalidArgument on anything
// else, naming what is wrong.
absl::StatusOr<proto::Policy> ParsePolicyJson(const std::string& text);

// The settings that execute `p` for the model `c`: InvalidArgument when the
// policy does not fit the model (layer count, fractions, a family the
// model has no use for).
absl::StatusOr<ServingSettings> SettingsFromPolicy(const proto::Policy& p, const ModelConfig& c);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SEARCH_SERVING_SETTINGS_H_
