// The step simulator: in-order resource streams with cross-stream
// dependencies (see step_simulator.h).
//
// Because a task may only depend on tasks added before it, and the tasks of
// one resource run in submission order, one pass in submission order is an
// exact discrete-event simulation: when task i is reached, every task it can
// wait for (its dependencies and its predecessor on the same resource) has
// already been placed. No event queue is needed, and the result does not
// depend on tie-breaking.
#include "coordinator/planner/sim/step_simulator.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::planner {

std::string_view ResourceName(Resource r) {
  switch (r) {
    case Resource::kGpu:
      return "gpu";
    case Resource::kH2d:
      return "h2d";
    case Resource::kD2h:
      return "d2h";
    case Resource::kCpu:
      return "cpu";
    case Resource::kLaunch:
      return "launch";
  }
  return "unknown";
}

TaskId StepGraph::Add(std::string name, Resource resource, double duration_s,
                      std::vector<TaskId> deps) {
  // Bad dependencies and durations are reported by Simulate(), not here:
  // Add() has no error channel and graph construction must never abort on
  // numbers that came from a profile or a model file.
  const TaskId id = static_cast<TaskId>(tasks_.size());
  tasks_.push_back(
      Task{std::move(name), resource, duration_s, std::move(deps)});
  return id;
}

Resource SimResult::bottleneck() const {
  int best = 0;
  for (int r = 1; r < kNumResources; ++r) {
    if (busy_s[r] > busy_s[best]) best = r;  // strict: ties keep the first
  }
  return static_cast<Resource>(best);
}

absl::StatusOr<SimResult> Simulate(const StepGraph& graph) {
  const std::vector<Task>& tasks = graph.tasks();
  SimResult result;
  result.timings.resize(tasks.size());
  // When each resource becomes free: the end of the last task placed on it.
  std::array<double, kNumResources> free_at{};
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    const int r = static_cast<int>(t.resource);
    if (r < 0 || r >= kNumResources) {
      return absl::InvalidArgumentError(
          absl::StrCat("task ", i, " '", t.name, "': unknown resource ", r));
    }
    if (!std::isfinite(t.duration_s) || t.duration_s < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", i, " '", t.name, "': duration must be finite and >= 0, got ",
          t.duration_s));
    }
    double start = free_at[r];
    for (TaskId d : t.deps) {
      if (d < 0 || static_cast<size_t>(d) >= i) {
        return absl::InvalidArgumentError(
            absl::StrCat("task ", i, " '", t.name, "': dependency ", d,
                         " must name a task added before it (0..",
                         static_cast<int64_t>(i) - 1, ")"));
      }
      start = std::max(start, result.timings[d].end_s);
    }
    const double end = start + t.duration_s;
    result.timings[i] = TaskTiming{start, end};
    free_at[r] = end;
    result.busy_s[r] += t.duration_s;
    result.makespan_s = std::max(result.makespan_s, end);
  }
  return result;
}

}  // namespace tandem::planner
