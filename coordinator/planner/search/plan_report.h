// `tandem plan`'s output: the chosen policy in words, its predicted figures
// and bottleneck, and the other families' best policies beside it (or why a
// family cannot run the model) — as a table for people or JSON for scripts.
#ifndef TANDEM_COORDINATOR_PLANNER_SEARCH_PLAN_REPORT_H_
#define TANDEM_COORDINATOR_PLANNER_SEARCH_PLAN_REPORT_H_

#include <string>

#include "coordinator/planner/search/policy_search.h"
#include "nlohmann/json.hpp"

namespace tandem::planner {

// One line describing a policy's placement and batching, e.g.
// "attention on CPU, FFN on GPU, N=936 (26 x 36), r_w=0.12".
std::string DescribePolicy(const proto::Policy& p);

std::string FormatPlanReport(const SearchResult& r, const ModelCost& model,
                             const HardwareProfile& hardware, const Workload& workload);

// {"model": ..., "hardware": ..., "workload": ..., "best": <Policy as JSON>,
//  "meets_slo": bool, "families": [{"family", "status", "policy"?}, ...]}
nlohmann::json PlanReportJson(const SearchResult& r, const ModelCost& model,
                              const HardwareProfile& hardware, const Workload& workload);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SEARCH_PLAN_REPORT_H_
