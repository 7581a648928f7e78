#include "common/experts/expert_split.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::experts {
namespace {

absl::StatusOr<double> Checked(double seconds, const char* what,
                               const ExpertWork& e) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert split: ", what, " of expert ", e.expert, " (",
                     e.tokens, " tokens) is ", seconds));
  }
  return seconds;
}

}  // namespace

absl::StatusOr<ExpertSplit> SplitExperts(absl::Span<const ExpertWork> experts,
                                         const ExpertCosts& costs) {
  if (!costs.gpu_compute_s || !costs.cpu_compute_s) {
    return absl::InvalidArgumentError(
        "expert split: both cost functions are needed");
  }
  if (!std::isfinite(costs.transfer_s) || costs.transfer_s < 0) {
    return absl::InvalidArgumentError(
        "expert split: transfer time must be finite and >= 0");
  }
  std::vector<ExpertWork> order;
  std::unordered_set<int> seen;
  for (const ExpertWork& e : experts) {
    if (e.tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert split: expert ", e.expert, " has ", e.tokens, " tokens"));
    }
    if (!seen.insert(e.expert).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert split: expert ", e.expert, " twice"));
    }
    if (e.tokens > 0) order.push_back(e);
  }
  // Cached first, then the most tokens first.
  std::stable_sort(order.begin(), order.end(),
                   [](const ExpertWork& a, const ExpertWork& b) {
                     if (a.cached != b.cached) return a.cached;
                     return a.tokens > b.tokens;
                   });

  ExpertSplit split;
  double gpu_t = 0, cpu_t = 0, link_t = 0;
  size_t head = 0,
         tail = order.size();  // the unassigned experts are [head, tail)
  while (head < tail) {
    const ExpertWork& g = order[head];
    const ExpertWork& c = order[tail - 1];
    auto gpu_compute = Checked(costs.gpu_compute_s(g.tokens), "GPU time", g);
    if (!gpu_compute.ok()) return gpu_compute.status();
    auto cpu_compute = Checked(costs.cpu_compute_s(c.tokens), "CPU time", c);
    if (!cpu_compute.ok()) return cpu_compute.status();

    const double arrives = g.cached ? 0 : link_t + costs.transfer_s;
    const double gpu_start = std::max(gpu_t, arrives);
    const double gpu_finish = gpu_start + *gpu_compute;
    const double cpu_finish = cpu_t + *cpu_compute;
    if (gpu_finish <= cpu_finish) {
      if (!g.cached) {
        link_t = arrives;
        split.link_busy_s += costs.transfer_s;
      }
      split.gpu.push_back({g.expert, g.tokens, g.cached, Side::kGpu, gpu_start,
                           gpu_finish, g.cached ? 0 : arrives});
      gpu_t = gpu_finish;
      ++head;
    } else {
      split.cpu.push_back(
          {c.expert, c.tokens, c.cached, Side::kCpu, cpu_t, cpu_finish, 0});
      cpu_t = cpu_finish;
      --tail;
    }
  }
  split.gpu_finish_s = gpu_t;
  split.cpu_finish_s = cpu_t;
  return split;
}

}  // namespace tandem::experts
