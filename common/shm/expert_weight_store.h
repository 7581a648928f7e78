// The routed experts a cpu_worker computes, held in a HostWeightStore so that
// the cpu_worker and its gpu_worker map the same bytes: the cpu_worker
// builds the store from the checkpoint and computes from it (CC); the
// gpu_worker maps it at LoadModel, checks it holds what the placement says,
// and keeps the mapping (to pin it for DMA and stream CG experts from it).
//
// Tensors are named "blk.<layer>.ffn_{gate,up,down}_exps.<expert>", each one
// expert's [rows, cols] slice in the checkpoint's stored dtype (quantized
// blocks included). The store of the cpu_worker on rings <prefix> is named
// "<prefix>-weights".
#ifndef TANDEM_COMMON_SHM_EXPERT_WEIGHT_STORE_H_
#define TANDEM_COMMON_SHM_EXPERT_WEIGHT_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "common/shm/host_weight_store.h"

namespace tandem::shm {

// The GGUF-style bases of one expert's three matrices.
inline constexpr const char* kExpertWeightBases[] = {"ffn_gate_exps", "ffn_up_exps",
                                                     "ffn_down_exps"};

std::string ExpertWeightStoreName(const std::string& ring_prefix);
std::string ExpertWeightName(int64_t layer, const std::string& base, int64_t expert);

// Creates the store `name` holding experts[layer] of `ckpt`, sealed.
absl::StatusOr<std::unique_ptr<HostWeightStore>> BuildExpertWeightStore(
    const Checkpoint& ckpt, const std::vector<std::vector<int32_t>>& experts,
    const std::string& name);

// OK when `store` is sealed and holds every tensor of experts[layer] with the
// checkpoint's dtype, shape and bytes (compared at the start and the end of
// each tensor: a cheap guard against a different model or placement).
// FailedPrecondition naming the first mismatch otherwise.
absl::Status VerifyExpertWeightStore(const HostWeightStore& store, const Checkpoint& ckpt,
                                     const std::vector<std::vector<int32_t>>& experts);

}  // namespace tandem::shm

#endif  // TANDEM_COMMON_SHM_EXPERT_WEIGHT_STORE_H_
