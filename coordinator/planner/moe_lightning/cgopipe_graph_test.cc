#include "coordinator/planner/moe_lightning/cgopipe_graph.h"

#include <algorithm>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace tandem::planner::ml {
namespace {

// Hand-made per-micro-batch times (seconds) of a layer with 4 micro-batches:
// GPU 1 + 2 = 3 per micro-batch (12 a layer), CPU 1 (4 a layer), H2D
// 0.1 + page 1 (4.4 a layer), D2H 0.1 (0.4 a layer): GPU-bound at 12.
LayerTimes GpuBound() {
  LayerTimes t;
  t.num_micro_batches = 4;
  t.pre_attention_ub = 1;
  t.post_attention_ub = 2;
  t.cpu_attention_ub = 1;
  t.qkv_offload_ub = 0.1;
  t.hidden_load_ub = 0.1;
  t.page_load = 1;
  return t;
}

PolicyPoint CpuAttention(int64_t n_ub) {
  PolicyPoint p;
  p.micro_batch_size = 8;
  p.batch_size = 8 * n_ub;
  return p;
}

std::map<std::string, TaskId> ByName(const StepGraph& g) {
  std::map<std::string, TaskId> m;
  for (size_t i = 0; i < g.tasks().size(); ++i)
    m[g.tasks()[i].name] = static_cast<TaskId>(i);
  return m;
}

SimResult SimulateGraph(const CgoPipeGraph& g) {
  absl::StatusOr<SimResult> r = Simulate(g.graph);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

TEST(CgoPipeGraphTest, TasksOfEveryMicroBatchOnTheirResources) {
  const CgoPipeGraph g = BuildCgoPipeGraph(GpuBound(), CpuAttention(4), 3);
  // Per layer and micro-batch: PreAttn, OffloadQKV, CPUAttn, LoadH, PostAttn,
  // PintoG (pages of layers 0..3: layer 0 in the prologue, the others
  // during the layer before); no launch tasks (zero launch time).
  const auto names = ByName(g.graph);
  EXPECT_EQ(g.graph.size(), 3u * 4 * 6 + 4);
  ASSERT_EQ(g.layer_end.size(), 3u);
  const auto& tasks = g.graph.tasks();
  EXPECT_EQ(tasks[names.at("PreAttn(L1,ub2)")].resource, Resource::kGpu);
  EXPECT_EQ(tasks[names.at("OffloadQKV(L1,ub2)")].resource, Resource::kD2h);
  EXPECT_EQ(tasks[names.at("CPUAttn(L1,ub2)")].resource, Resource::kCpu);
  EXPECT_EQ(tasks[names.at("LoadH(L1,ub2)")].resource, Resource::kH2d);
  EXPECT_EQ(tasks[names.at("PintoG(L2,ub3)")].resource, Resource::kH2d);
  EXPECT_EQ(names.count("PintoG(L3,ub0)"), 1u);    // the next layer's pages
  EXPECT_EQ(names.count("PostAttn(L3,ub0)"), 0u);  // but not its compute
  EXPECT_EQ(g.layer_end[1], names.at("PostAttn(L1,ub3)"));
}

TEST(CgoPipeGraphTest, IssueOrderFollowsAlgorithmOne) {
  const CgoPipeGraph g = BuildCgoPipeGraph(GpuBound(), CpuAttention(4), 2);
  const auto names = ByName(g.graph);
  // On the H2D stream LoadH(i,j) precedes page j of layer i+1, which
  // precedes LoadH(i,j+1); PreAttn runs two micro-batches ahead, wrapping
  // into the next layer: PreAttn(L1,ub0) is issued right after
  // PostAttn(L0,ub2) and PreAttn(L1,ub1) after PostAttn(L0,ub3).
  EXPECT_LT(names.at("LoadH(L0,ub1)"), names.at("PintoG(L1,ub1)"));
  EXPECT_LT(names.at("PintoG(L1,ub1)"), names.at("LoadH(L0,ub2)"));
  EXPECT_LT(names.at("PostAttn(L0,ub2)"), names.at("PreAttn(L1,ub0)"));
  EXPECT_LT(names.at("PreAttn(L1,ub0)"), names.at("LoadH(L0,ub3)"));
  EXPECT_LT(names.at("PostAttn(L0,ub3)"), names.at("PreAttn(L1,ub1)"));
  EXPECT_LT(names.at("PreAttn(L0,ub3)"), names.at("PostAttn(L0,ub2)"));
}

TEST(CgoPipeGraphTest, DependenciesHold) {
  const CgoPipeGraph g = BuildCgoPipeGraph(GpuBound(), CpuAttention(4), 3);
  const SimResult r = SimulateGraph(g);
  const auto n = ByName(g.graph);
  auto start = [&](const char* s) { return r.timings[n.at(s)].start_s; };
  auto end = [&](const char* s) { return r.timings[n.at(s)].end_s; };
  EXPECT_GE(start("OffloadQKV(L1,ub1)"), end("PreAttn(L1,ub1)"));
  EXPECT_GE(start("CPUAttn(L1,ub1)"), end("OffloadQKV(L1,ub1)"));
  EXPECT_GE(start("LoadH(L1,ub1)"), end("CPUAttn(L1,ub1)"));
  EXPECT_GE(start("PostAttn(L1,ub1)"), end("LoadH(L1,ub1)"));
  // PostAttn needs its whole layer's weights; the next layer's PreAttn of a
  // micro-batch needs this layer's PostAttn of it (its residual).
  EXPECT_GE(start("PostAttn(L1,ub0)"), end("PintoG(L1,ub3)"));
  EXPECT_GE(start("PreAttn(L2,ub1)"), end("PostAttn(L1,ub1)"));
  // Double buffer: layer 2's pages overwrite layer 0's.
  EXPECT_GE(start("PintoG(L2,ub0)"), end("PostAttn(L0,ub3)"));
}

TEST(CgoPipeGraphTest, SteadyStateReachesTheBottleneckResource) {
  // GPU-bound: 4 x (1 + 2) = 12 s a layer.
  {
    const CgoPipeGraph g = BuildCgoPipeGraph(GpuBound(), CpuAttention(4), 6);
    EXPECT_NEAR(SteadyLayerSeconds(g, SimulateGraph(g)), 12.0, 0.12);
  }
  // H2D-bound: pages of 5 s: 4 x (5 + 0.1) = 20.4 s a layer.
  {
    LayerTimes t = GpuBound();
    t.page_load = 5;
    const CgoPipeGraph g = BuildCgoPipeGraph(t, CpuAttention(4), 6);
    EXPECT_NEAR(SteadyLayerSeconds(g, SimulateGraph(g)), 20.4, 0.2);
  }
  // CPU-bound: attention 6 s a micro-batch: 24 s a layer.
  {
    LayerTimes t = GpuBound();
    t.cpu_attention_ub = 6;
    const CgoPipeGraph g = BuildCgoPipeGraph(t, CpuAttention(4), 6);
    EXPECT_NEAR(SteadyLayerSeconds(g, SimulateGraph(g)), 24.0, 0.24);
  }
}

TEST(CgoPipeGraphTest, LayerBusyExcludesTheCarriedInPages) {
  const CgoPipeGraph g = BuildCgoPipeGraph(GpuBound(), CpuAttention(4), 3);
  const SimResult r = SimulateGraph(g);
  ASSERT_EQ(g.carried_in.size(), 4u);  // layer 0's four pages
  // Per layer: GPU 4 x 3, CPU 4 x 1, D2H 4 x 0.1, H2D 4 x (0.1 + 1).
  EXPECT_NEAR(LayerBusySeconds(g, r, Resource::kGpu), 12, 1e-9);
  EXPECT_NEAR(LayerBusySeconds(g, r, Resource::kCpu), 4, 1e-9);
  EXPECT_NEAR(LayerBusySeconds(g, r, Resource::kD2h), 0.4, 1e-9);
  EXPECT_NEAR(LayerBusySeconds(g, r, Resource::kH2d), 4.4, 1e-9);
  EXPECT_EQ(LayerBusySeconds(g, r, Resource::kLaunch), 0);
}

TEST(CgoPipeGraphTest, SingleMicroBatchLooksOneAhead) {
  LayerTimes t = GpuBound();
  t.num_micro_batches = 1;
  const CgoPipeGraph g = BuildCgoPipeGraph(t, CpuAttention(1), 3);
  const SimResult r = SimulateGraph(g);
  // Nothing overlaps within a layer of one micro-batch: per layer the
  // chain PreAttn 1, D1 0.1, CPU 1, D2 0.1, PostAttn 2 = 4.2 s; the next
  // layer's one page (1 s) loads under it.
  EXPECT_NEAR(SteadyLayerSeconds(g, r), 4.2, 1e-9);
}

TEST(CgoPipeGraphTest, GpuAttentionSwapsKvInstead) {
  LayerTimes t;
  t.num_micro_batches = 2;
  t.pre_attention_ub = 1;
  t.post_attention_ub = 1;
  t.kv_load_ub = 3;
  t.kv_offload_ub = 0.1;
  t.page_load = 0.5;
  PolicyPoint p = CpuAttention(2);
  p.attention_on_gpu = true;
  const CgoPipeGraph g = BuildCgoPipeGraph(t, p, 4);
  const auto n = ByName(g.graph);
  EXPECT_EQ(n.count("CPUAttn(L0,ub0)"), 0u);
  EXPECT_EQ(n.count("LoadH(L0,ub0)"), 0u);
  ASSERT_EQ(n.count("LoadKV(L1,ub1)"), 1u);
  // H2D carries the KV (3 s) and a page (0.5 s) per micro-batch: 7 s a
  // layer against 4 s of GPU work: S4's KV traffic starves the link.
  EXPECT_NEAR(SteadyLayerSeconds(g, SimulateGraph(g)), 7.0, 0.07);
}

TEST(CgoPipeGraphTest, HostFfnAndTwoHopStagingAddCpuTasks) {
  LayerTimes t = GpuBound();
  t.cpu_ffn_ub = 0.5;
  t.ffn_offload_ub = 0.05;
  t.ffn_load_ub = 0.05;
  t.page_stage = 0.25;
  const CgoPipeGraph g = BuildCgoPipeGraph(t, CpuAttention(4), 3);
  const auto n = ByName(g.graph);
  ASSERT_EQ(n.count("CPUFFN(L1,ub2)"), 1u);
  ASSERT_EQ(n.count("CtoPin(L2,ub0)"), 1u);
  EXPECT_EQ(g.graph.tasks()[n.at("CtoPin(L2,ub0)")].resource, Resource::kCpu);
  const SimResult r = SimulateGraph(g);
  // The next layer's PreAttn waits for the FFN output to come back.
  EXPECT_GE(r.timings[n.at("PreAttn(L1,ub0)")].start_s,
            r.timings[n.at("LoadFFN(L0,ub0)")].end_s);
  EXPECT_EQ(g.layer_end[0], n.at("LoadFFN(L0,ub3)"));
  // CPU: 3 layers x 4 x (1 + 0.5) of compute and 18 page copies x 0.25:
  // layer 0's 4 and layer 1's first 2 (carried in), then 4 a layer, two
  // pages ahead of their DMA (the last layer copies layer 4's first 2).
  EXPECT_NEAR(r.busy(Resource::kCpu), 3 * 4 * (1 + 0.5) + 18 * 0.25, 1e-9);
  EXPECT_EQ(g.carried_in.size(), 4u + 4u + 2u);  // 4 PintoG, 6 CtoPin
  EXPECT_NEAR(LayerBusySeconds(g, r, Resource::kCpu), 4 * (1 + 0.5 + 0.25),
              1e-9);
}

TEST(CgoPipeGraphTest, TwoHopStagingRunsTwoPagesAhead) {
  // Link-bound two hops: pages of 5 s on the H2D stream, each first copied
  // to pinned memory by the CPU in 2 s (CPU 4 x (1 + 2) = 12 s a layer).
  LayerTimes t = GpuBound();
  t.page_load = 5;
  t.page_stage = 2;
  const CgoPipeGraph g = BuildCgoPipeGraph(t, CpuAttention(4), 6);
  const auto n = ByName(g.graph);
  // Algorithm 1: W_CtoPin(i+1, j+2) right after CPUAttn(i, j+2), two
  // iterations before its W_PintoG; the prologue copies layer 1's first two
  // pages after the first two CPUAttn.
  EXPECT_LT(n.at("CPUAttn(L0,ub0)"), n.at("CtoPin(L1,ub0)"));
  EXPECT_LT(n.at("CtoPin(L1,ub0)"), n.at("CPUAttn(L0,ub1)"));
  EXPECT_LT(n.at("CPUAttn(L0,ub2)"), n.at("CtoPin(L1,ub2)"));
  EXPECT_LT(n.at("CtoPin(L1,ub2)"), n.at("PintoG(L1,ub1)"));
  EXPECT_LT(n.at("CPUAttn(L1,ub0)"), n.at("CtoPin(L2,ub0)"));
  const auto& deps = g.graph.tasks()[n.at("PintoG(L1,ub2)")].deps;
  EXPECT_NE(std::find(deps.begin(), deps.end(), n.at("CtoPin(L1,ub2)")),
            deps.end());
  // So the copies hide under the link: 4 x (5 + 0.1) = 20.4 s a layer, as
  // without them. (Copied right before its own DMA, each page would wait
  // for its copy behind the CPU attention: 28 s.)
  EXPECT_NEAR(SteadyLayerSeconds(g, SimulateGraph(g)), 20.4, 0.2);
}

TEST(CgoPipeGraphTest, HostFfnKeepsTheCpuBusy) {
  // GPU attention and a host FFN with two micro-batches (what the search
  // picks under a tight ITL SLO): per micro-batch LoadKV 2.3, PreAttn 0.5,
  // PostAttn 1.5, the FFN 27.7 on the CPU. The CPU binds at 2 x 27.7 = 55.4
  // a layer, and the other micro-batch's GPU work fits under it, so the
  // pipeline must reach that (issued two ahead, PreAttn would wait for the
  // CPU in front of the other PostAttn and serialize them: 63.6).
  LayerTimes t;
  t.num_micro_batches = 2;
  t.pre_attention_ub = 0.5;
  t.post_attention_ub = 1.5;
  t.kv_load_ub = 2.3;
  t.cpu_ffn_ub = 27.7;
  t.ffn_offload_ub = 0.05;
  t.ffn_load_ub = 0.05;
  PolicyPoint p = CpuAttention(2);
  p.attention_on_gpu = true;
  p.ffn_on_gpu = false;
  const CgoPipeGraph g = BuildCgoPipeGraph(t, p, 6);
  EXPECT_NEAR(SteadyLayerSeconds(g, SimulateGraph(g)), 55.4, 0.01);
}

}  // namespace
}  // namespace tandem::planner::ml
