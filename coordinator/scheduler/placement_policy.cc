#include "coordinator/scheduler/placement_policy.h"

#include <algorithm>

namespace tandem::sched {
namespace {

bool IsCandidate(const PlacementContext& ctx, KvPool pool) {
  return std::find(ctx.candidates.begin(), ctx.candidates.end(), pool) !=
         ctx.candidates.end();
}

bool HasFree(const PlacementContext& ctx, KvPool pool, int64_t blocks) {
  return IsCandidate(ctx, pool) && ctx.blocks->num_free_blocks(pool) >= blocks;
}

}  // namespace

std::optional<KvPool> DefaultPlacementPolicy::ChoosePool(
    const Request& /*request*/, const PlacementContext& ctx) const {
  const BlockManager& b = *ctx.blocks;
  if (IsCandidate(ctx, KvPool::kGpu)) {
    const double used_after =
        static_cast<double>(b.num_used_blocks(KvPool::kGpu) + ctx.blocks_full);
    if (HasFree(ctx, KvPool::kGpu, ctx.blocks_full) &&
        used_after <=
            gpu_watermark_ * static_cast<double>(b.num_blocks(KvPool::kGpu))) {
      return KvPool::kGpu;
    }
  }
  if (HasFree(ctx, KvPool::kCpu, ctx.blocks_full)) return KvPool::kCpu;
  if (HasFree(ctx, KvPool::kGpu, ctx.blocks_now)) return KvPool::kGpu;
  if (HasFree(ctx, KvPool::kCpu, ctx.blocks_now)) return KvPool::kCpu;
  return std::nullopt;
}

std::optional<KvPool> FixedPlacementPolicy::ChoosePool(
    const Request& /*request*/, const PlacementContext& ctx) const {
  if (HasFree(ctx, pool_, ctx.blocks_now)) return pool_;
  return std::nullopt;
}

}  // namespace tandem::sched
