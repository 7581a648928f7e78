// Which routed experts a step actually activated, read from the router's
// decisions as the engine acts on them: an ExpertOffload that claims no
// expert (so every expert still runs locally, unchanged) but records each
// expert the engine asks about. The engine asks IsRemote exactly for the
// experts that received at least one token in a layer (engine.cc, Moe), so
// the distinct (layer, expert) pairs seen during a step are the experts
// whose weights that step read.
#ifndef TANDEM_GPU_WORKER_BENCH_EXPERT_USAGE_H_
#define TANDEM_GPU_WORKER_BENCH_EXPERT_USAGE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gpu_worker/engine/expert_offload.h"

namespace tandem::bench {

class ExpertUsage : public ExpertOffload {
 public:
  explicit ExpertUsage(int64_t num_experts) : num_experts_(num_experts) {}

  bool IsRemote(int64_t layer, int64_t expert) const override {
    seen_.insert(layer * num_experts_ + expert);
    return false;
  }
  // Never called: no expert is remote.
  absl::Status Submit(int64_t, const std::vector<ExpertJob>&) override { return absl::OkStatus(); }
  absl::Status Collect(int64_t, const std::vector<ExpertJob>&) override { return absl::OkStatus(); }

  void Reset() { seen_.clear(); }
  // Distinct (layer, expert) pairs activated since the last Reset.
  int64_t distinct() const { return static_cast<int64_t>(seen_.size()); }

 private:
  int64_t num_experts_;
  mutable absl::flat_hash_set<int64_t> seen_;  // layer * num_experts + expert
};

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_EXPERT_USAGE_H_
