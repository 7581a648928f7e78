#include "coordinator/planner/sim/step_simulator.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::planner {
namespace {

using ::testing::HasSubstr;

constexpr double kEps = 1e-12;

void ExpectTiming(const SimResult& r, TaskId id, double start, double end) {
  ASSERT_LT(static_cast<size_t>(id), r.timings.size());
  EXPECT_NEAR(r.timings[id].start_s, start, kEps) << "task " << id;
  EXPECT_NEAR(r.timings[id].end_s, end, kEps) << "task " << id;
}

TEST(ResourceNameTest, Names) {
  EXPECT_EQ(ResourceName(Resource::kGpu), "gpu");
  EXPECT_EQ(ResourceName(Resource::kH2d), "h2d");
  EXPECT_EQ(ResourceName(Resource::kD2h), "d2h");
  EXPECT_EQ(ResourceName(Resource::kCpu), "cpu");
  EXPECT_EQ(ResourceName(Resource::kLaunch), "launch");
}

TEST(SimulateTest, EmptyGraph) {
  StepGraph g;
  absl::StatusOr<SimResult> r = Simulate(g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->makespan_s, 0);
  EXPECT_TRUE(r->timings.empty());
  EXPECT_EQ(r->bottleneck(),
            Resource::kGpu);  // all zero: the first in enum order
}

// Tasks of one resource run back to back in submission order; different
// resources run in parallel.
//   gpu: A [0,2] B [2,5]      cpu: C [0,1]
TEST(SimulateTest, InOrderStreamsRunInParallel) {
  StepGraph g;
  TaskId a = g.Add("A", Resource::kGpu, 2);
  TaskId b = g.Add("B", Resource::kGpu, 3);
  TaskId c = g.Add("C", Resource::kCpu, 1);
  absl::StatusOr<SimResult> r = Simulate(g);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTiming(*r, a, 0, 2);
  ExpectTiming(*r, b, 2, 5);
  ExpectTiming(*r, c, 0, 1);
  EXPECT_NEAR(r->makespan_s, 5, kEps);
  EXPECT_NEAR(r->busy(Resource::kGpu), 5, kEps);
  EXPECT_NEAR(r->busy(Resource::kCpu), 1, kEps);
  EXPECT_EQ(r->bottleneck(), Resource::kGpu);
}

// ScheInfer's recurrence on two GEMMs (launch 1, copy 4, GEMM 2), a CPU task
// of 3 and a D2H copy that needs the first GEMM and the CPU task:
//   launch: L0 [0,1]  L1 [1,2]
//   h2d:    C0 [1,5]  C1 [max(5 free, 2 launched)=5, 9]
//   gpu:    G0 [5,7]  G1 [max(7 free, 9 copied)=9, 11]
//   cpu:    P  [0,3]
//   d2h:    Y  [max(G0 7, P 3)=7, 8]
// makespan 11; busy: launch 2, h2d 8, gpu 4, cpu 3, d2h 1 -> h2d-bound.
TEST(SimulateTest, DependenciesAcrossStreams) {
  StepGraph g;
  TaskId l0 = g.Add("L0", Resource::kLaunch, 1);
  TaskId c0 = g.Add("C0", Resource::kH2d, 4, {l0});
  TaskId g0 = g.Add("G0", Resource::kGpu, 2, {c0});
  TaskId l1 = g.Add("L1", Resource::kLaunch, 1);
  TaskId c1 = g.Add("C1", Resource::kH2d, 4, {l1});
  TaskId g1 = g.Add("G1", Resource::kGpu, 2, {c1});
  TaskId p = g.Add("P", Resource::kCpu, 3);
  TaskId y = g.Add("Y", Resource::kD2h, 1, {g0, p});
  absl::StatusOr<SimResult> r = Simulate(g);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTiming(*r, l0, 0, 1);
  ExpectTiming(*r, c0, 1, 5);
  ExpectTiming(*r, g0, 5, 7);
  ExpectTiming(*r, l1, 1, 2);
  ExpectTiming(*r, c1, 5, 9);
  ExpectTiming(*r, g1, 9, 11);
  ExpectTiming(*r, p, 0, 3);
  ExpectTiming(*r, y, 7, 8);
  EXPECT_NEAR(r->makespan_s, 11, kEps);
  EXPECT_NEAR(r->busy(Resource::kLaunch), 2, kEps);
  EXPECT_NEAR(r->busy(Resource::kH2d), 8, kEps);
  EXPECT_NEAR(r->busy(Resource::kGpu), 4, kEps);
  EXPECT_NEAR(r->busy(Resource::kCpu), 3, kEps);
  EXPECT_NEAR(r->busy(Resource::kD2h), 1, kEps);
  EXPECT_EQ(r->bottleneck(), Resource::kH2d);
}

// A dependency holds a task back while its resource idles, and the next task
// of that resource queues behind it even if it could have run earlier (the
// stream is in order, not a pool):
//   cpu: P [0,5]   gpu: X [5,6] (waits for P)  Z [6,7] (no deps, but after X)
TEST(SimulateTest, InOrderStreamDoesNotReorder) {
  StepGraph g;
  TaskId p = g.Add("P", Resource::kCpu, 5);
  TaskId x = g.Add("X", Resource::kGpu, 1, {p});
  TaskId z = g.Add("Z", Resource::kGpu, 1);
  absl::StatusOr<SimResult> r = Simulate(g);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTiming(*r, x, 5, 6);
  ExpectTiming(*r, z, 6, 7);
  EXPECT_NEAR(r->makespan_s, 7, kEps);
  // cpu busy 5 > gpu busy 2: the bottleneck is the most-busy resource, not
  // the one that finishes last.
  EXPECT_EQ(r->bottleneck(), Resource::kCpu);
}

// Zero-duration tasks pass their dependencies' end time through.
TEST(SimulateTest, ZeroDurationTask) {
  StepGraph g;
  TaskId a = g.Add("A", Resource::kH2d, 2.5);
  TaskId b = g.Add("B", Resource::kLaunch, 0, {a});
  TaskId c = g.Add("C", Resource::kGpu, 1, {b});
  absl::StatusOr<SimResult> r = Simulate(g);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTiming(*r, b, 2.5, 2.5);
  ExpectTiming(*r, c, 2.5, 3.5);
}

TEST(SimulateTest, BottleneckTiesGoToTheFirstResource) {
  {
    StepGraph g;
    g.Add("cpu", Resource::kCpu, 2);
    g.Add("gpu", Resource::kGpu, 2);
    absl::StatusOr<SimResult> r = Simulate(g);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->bottleneck(), Resource::kGpu);
  }
  {
    StepGraph g;
    g.Add("cpu", Resource::kCpu, 2);
    g.Add("h2d", Resource::kH2d, 2);
    g.Add("gpu", Resource::kGpu, 1);
    absl::StatusOr<SimResult> r = Simulate(g);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->bottleneck(), Resource::kH2d);
  }
}

TEST(SimulateTest, RejectsDependencyOnItselfOrLaterTask) {
  {
    StepGraph g;
    g.Add("A", Resource::kGpu, 1, {0});  // itself
    absl::StatusOr<SimResult> r = Simulate(g);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("'A'"));
  }
  {
    StepGraph g;
    g.Add("A", Resource::kGpu, 1, {1});  // a later task
    g.Add("B", Resource::kGpu, 1);
    EXPECT_EQ(Simulate(g).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    StepGraph g;
    g.Add("A", Resource::kGpu, 1);
    g.Add("B", Resource::kGpu, 1, {-1});  // unknown
    EXPECT_EQ(Simulate(g).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    StepGraph g;
    g.Add("A", Resource::kGpu, 1, {7});  // beyond the graph
    EXPECT_EQ(Simulate(g).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(SimulateTest, RejectsBadDurations) {
  for (double d : {-1.0, -1e-300, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    StepGraph g;
    g.Add("ok", Resource::kCpu, 1);
    g.Add("bad", Resource::kGpu, d);
    absl::StatusOr<SimResult> r = Simulate(g);
    ASSERT_FALSE(r.ok()) << d;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("'bad'"));
  }
}

TEST(SimulateTest, RejectsUnknownResource) {
  StepGraph g;
  g.Add("weird", static_cast<Resource>(9), 1);
  EXPECT_EQ(Simulate(g).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChromeTraceTest, ParsesWithOneCompleteEventPerTask) {
  StepGraph g;
  TaskId l0 = g.Add("L0 launch", Resource::kLaunch, 1e-6);
  TaskId c0 = g.Add("L0 copy", Resource::kH2d, 4e-6, {l0});
  g.Add("L0 \"gemm\"", Resource::kGpu, 2e-6,
        {c0});  // a name that needs escaping
  g.Add("L0 cpu", Resource::kCpu, 3e-6);
  absl::StatusOr<SimResult> r = Simulate(g);
  ASSERT_TRUE(r.ok());
  const std::string text = ChromeTraceJson(g, *r);
  nlohmann::json j =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << text;
  ASSERT_TRUE(j.contains("traceEvents"));
  int complete = 0, thread_names = 0;
  std::set<int> pids;
  for (const nlohmann::json& e : j["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      ++thread_names;
      EXPECT_EQ(e["args"]["name"].get<std::string>(),
                ResourceName(static_cast<Resource>(e["tid"].get<int>())));
    }
    if (e["ph"] != "X") continue;
    ++complete;
    const int id = e["args"]["id"].get<int>();
    ASSERT_GE(id, 0);
    ASSERT_LT(id, static_cast<int>(g.size()));
    EXPECT_EQ(e["name"].get<std::string>(), g.tasks()[id].name);
    EXPECT_EQ(e["tid"].get<int>(), static_cast<int>(g.tasks()[id].resource));
    // Microseconds: the copy runs [1, 5] us.
    EXPECT_NEAR(e["ts"].get<double>(), r->timings[id].start_s * 1e6, 1e-9);
    EXPECT_NEAR(e["dur"].get<double>(), g.tasks()[id].duration_s * 1e6, 1e-9);
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(thread_names, kNumResources);
  EXPECT_EQ(pids.size(), 1u);
}

TEST(ChromeTraceTest, MismatchedResultDrawsOnlyTimedTasks) {
  StepGraph g;
  g.Add("A", Resource::kGpu, 1);
  g.Add("B", Resource::kGpu, 1);
  SimResult empty;
  nlohmann::json j = nlohmann::json::parse(ChromeTraceJson(g, empty), nullptr,
                                           /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  for (const nlohmann::json& e : j["traceEvents"]) EXPECT_NE(e["ph"], "X");
}

}  // namespace
}  // namespace tandem::planner
