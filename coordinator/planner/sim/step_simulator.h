// A discrete-event simulation of one step on the machine's resources. Each
// resource is an in-order stream (a CUDA stream, the copy engine of one
// direction, the CPU pool, the CPU thread that launches GPU work): a task
// starts when the previous task on its resource has finished and all of its
// dependencies have, and holds the resource for its duration. This is the
// recurrence ScheInfer writes for its four streams (copy i waits for launch
// i and copy i-1; GPU GEMM i waits for copy i and GEMM i-1) and the shape of
// MoE-Lightning's CGOPipe and Klotski's pipeline.
#ifndef TANDEM_COORDINATOR_PLANNER_SIM_STEP_SIMULATOR_H_
#define TANDEM_COORDINATOR_PLANNER_SIM_STEP_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::planner {

enum class Resource {
  kGpu,     // GPU compute stream
  kH2d,     // host-to-device copy engine
  kD2h,     // device-to-host copy engine
  kCpu,     // the CPU compute pool (durations already account for its threads)
  kLaunch,  // the host thread that issues GPU work (launch overhead)
};
inline constexpr int kNumResources = 5;
std::string_view ResourceName(Resource r);  // "gpu", "h2d", "d2h", "cpu", "launch"

using TaskId = int32_t;

struct Task {
  std::string name;      // shown in the trace, e.g. "L3 expert 5 copy"
  Resource resource = Resource::kGpu;
  double duration_s = 0;
  std::vector<TaskId> deps;
};

// Tasks in submission order; the order of the tasks of one resource is the
// order they run in.
class StepGraph {
 public:
  // deps must name tasks added before this one.
  TaskId Add(std::string name, Resource resource, double duration_s,
             std::vector<TaskId> deps = {});
  const std::vector<Task>& tasks() const { return tasks_; }
  size_t size() const { return tasks_.size(); }

 private:
  std::vector<Task> tasks_;
};

struct TaskTiming {
  double start_s = 0;
  double end_s = 0;
};

struct SimResult {
  double makespan_s = 0;                       // end of the last task
  std::array<double, kNumResources> busy_s{};  // summed durations per resource
  std::vector<TaskTiming> timings;             // per task, by TaskId
  // The resource with the most busy time (ties: the first in enum order).
  Resource bottleneck() const;
  double busy(Resource r) const { return busy_s[static_cast<int>(r)]; }
};

// InvalidArgument for a dependency on a later or unknown task, a negative or
// non-finite duration.
absl::StatusOr<SimResult> Simulate(const StepGraph& graph);

// Chrome trace-event JSON (chrome://tracing, Perfetto): one track per
// resource, one complete ("X") event per task, times in microseconds.
std::string ChromeTraceJson(const StepGraph& graph, const SimResult& result);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_SIM_STEP_SIMULATOR_H_
