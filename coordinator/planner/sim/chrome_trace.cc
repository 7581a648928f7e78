// Chrome trace-event JSON of a simulated step, for chrome://tracing and
// Perfetto (the "Trace Event Format": complete events "X" with ts/dur in
// microseconds, and "M" metadata events naming the process and threads).
#include <algorithm>
#include <string>

#include "coordinator/planner/sim/step_simulator.h"
#include "nlohmann/json.hpp"

namespace tandem::planner {

std::string ChromeTraceJson(const StepGraph& graph, const SimResult& result) {
  constexpr int kPid = 1;
  constexpr double kUs = 1e6;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", kPid},
                    {"args", {{"name", "tandem step"}}}});
  // One track per resource, in enum order (sort_index keeps that order in
  // the viewer instead of alphabetical).
  for (int r = 0; r < kNumResources; ++r) {
    const std::string name(ResourceName(static_cast<Resource>(r)));
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", r},
                      {"args", {{"name", name}}}});
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", r},
                      {"args", {{"sort_index", r}}}});
  }
  // A result from another graph (or none) must not crash a debugging aid:
  // only tasks that have a timing are drawn.
  const std::vector<Task>& tasks = graph.tasks();
  const size_t n = std::min(tasks.size(), result.timings.size());
  for (size_t i = 0; i < n; ++i) {
    const Task& t = tasks[i];
    const TaskTiming& tt = result.timings[i];
    nlohmann::json deps = nlohmann::json::array();
    for (TaskId d : t.deps) deps.push_back(d);
    events.push_back(
        {{"name", t.name},
         {"cat", std::string(ResourceName(t.resource))},
         {"ph", "X"},
         {"pid", kPid},
         {"tid", static_cast<int>(t.resource)},
         {"ts", tt.start_s * kUs},
         {"dur", (tt.end_s - tt.start_s) * kUs},
         {"args", {{"id", static_cast<int64_t>(i)}, {"deps", deps}}}});
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  // A task name from a model file could hold invalid UTF-8; replace rather
  // than throw (nothing may throw out of our code).
  return trace.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tandem::planner
