// What the planner plans for: the objective and the shape of the requests.
#ifndef TANDEM_COORDINATOR_PLANNER_COST_WORKLOAD_H_
#define TANDEM_COORDINATOR_PLANNER_COST_WORKLOAD_H_

#include <cstdint>

#include "absl/status/status.h"

namespace tandem::planner {

enum class Objective {
  // Offline batch generation: generated tokens / (prefill + decode time).
  kThroughput,
  // Online serving: the best throughput whose inter-token latency stays
  // within slo_itl_s.
  kThroughputUnderItlSlo,
};

struct Workload {
  Objective objective = Objective::kThroughput;
  int64_t prompt_len = 0;      // average prompt tokens (s)
  int64_t max_prompt_len = 0;  // longest prompt (padding, prefill peak); 0 = prompt_len
  int64_t gen_len = 0;         // generated tokens per request (n)
  double slo_itl_s = 0;        // kThroughputUnderItlSlo only
  // Requests available at once; 0 = as many as the policy wants (offline).
  int64_t max_batch = 0;

  int64_t longest_prompt() const { return max_prompt_len > 0 ? max_prompt_len : prompt_len; }
  // Average keys a decode step attends over: s + n/2.
  double mean_decode_context() const {
    return static_cast<double>(prompt_len) + static_cast<double>(gen_len) / 2.0;
  }
  absl::Status Validate() const;
};

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_COST_WORKLOAD_H_
