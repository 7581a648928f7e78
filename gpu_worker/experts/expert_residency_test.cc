#include "gpu_worker/experts/expert_residency.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using experts::ExpertCosts;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The CPU is too slow to take anything: every activated expert runs on the
// GPU, so a scenario is about residency alone.
ExpertCosts GpuOnlyCosts() {
  ExpertCosts c;
  c.gpu_compute_s = [](int64_t) { return 0.5; };
  c.cpu_compute_s = [](int64_t) { return 1e9; };
  c.transfer_s = 0.418;
  return c;
}

// HybriMoE's Mixtral costs (ms): GPU 0.5, CPU 0.2·tokens + 0.79, link 0.418.
ExpertCosts HybriMoeCosts() {
  ExpertCosts c;
  c.gpu_compute_s = [](int64_t) { return 0.5; };
  c.cpu_compute_s = [](int64_t t) {
    return 0.2 * static_cast<double>(t) + 0.79;
  };
  c.transfer_s = 0.418;
  return c;
}

ExpertResidency Make(int layers, int experts, int capacity, int budget) {
  ExpertResidencyOptions o;
  o.num_layers = layers;
  o.num_experts = experts;
  o.capacity_per_layer = capacity;
  o.prefetch_budget = budget;
  auto r = ExpertResidency::Create(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

LayerRouting Routing(std::vector<ExpertActivation> activated) {
  LayerRouting r;
  r.activated = std::move(activated);
  return r;
}

TEST(ExpertResidency, HotExpertStaysColdExpertIsNotAdmitted) {
  // One layer, 4 experts, 2 slots, α = 0.5, no prefetch.
  ExpertResidency r = Make(1, 4, 2, 0);
  // Step 1: e0 (score 0.6), e1 (0.2) both miss and load, best first; the
  // scores become S0 = 0.3, S1 = 0.1 and both take a free slot.
  auto p = r.PlanLayer(0, Routing({{0, 4, 0.6}, {1, 1, 0.2}}), GpuOnlyCosts());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->gpu_hits, IsEmpty());
  EXPECT_THAT(p->gpu_loads, ElementsAre(0, 1));
  EXPECT_THAT(p->admitted, ElementsAre(0, 1));
  EXPECT_THAT(p->evictions, IsEmpty());

  // Step 2: e0 hits; e2 (0.4) misses. S0 = 0.45, S1 = 0.05, S2 = 0.2: e2
  // displaces the coldest resident, e1.
  p = r.PlanLayer(0, Routing({{0, 4, 0.6}, {2, 2, 0.4}}), GpuOnlyCosts());
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->gpu_hits, ElementsAre(0));
  EXPECT_THAT(p->gpu_loads, ElementsAre(2));
  EXPECT_THAT(p->evictions, ElementsAre(1));
  EXPECT_THAT(p->admitted, ElementsAre(2));
  EXPECT_THAT(r.Resident(0), ElementsAre(0, 2));

  // Step 3: e0 hits again; e3 (0.05) misses. S0 = 0.525, S2 = 0.1,
  // S3 = 0.025 < the coldest resident: e3 runs from staging, not kept.
  p = r.PlanLayer(0, Routing({{0, 4, 0.6}, {3, 1, 0.05}}), GpuOnlyCosts());
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->gpu_hits, ElementsAre(0));
  EXPECT_THAT(p->gpu_loads, ElementsAre(3));
  EXPECT_THAT(p->admitted, IsEmpty());
  EXPECT_THAT(p->evictions, IsEmpty());
  EXPECT_THAT(r.Resident(0), ElementsAre(0, 2));

  const ExpertResidencyStats s = r.Stats();
  EXPECT_EQ(s.total.activations, 6);
  EXPECT_EQ(s.total.hits, 2);
  EXPECT_EQ(s.total.misses, 4);
  EXPECT_EQ(s.total.loads, 4);
  EXPECT_EQ(s.total.admitted, 3);
  EXPECT_EQ(s.total.evictions, 1);
  EXPECT_EQ(s.resident, 2);
  EXPECT_EQ(s.capacity, 2);
}

TEST(ExpertResidency, SplitSendsTheColdSmallExpertToTheCpu) {
  ExpertResidency r = Make(1, 4, 1, 0);
  ASSERT_TRUE(r.PlanLayer(0, Routing({{0, 8, 1.0}}), GpuOnlyCosts()).ok());
  ASSERT_TRUE(r.IsResident(0, 0));
  // Order: e0 (cached, 8), e2 (6), e1 (1).
  //  e0 on the GPU ends at 0.5 <= the CPU's e1 at 0.2 + 0.79 = 0.99: GPU.
  //  e2 must cross the link (arrives 0.418), runs 0.5..1.0 > 0.99: the CPU
  //  takes e1 instead. e2 then: GPU 1.0 <= CPU 0.99 + 2.0: GPU.
  auto p = r.PlanLayer(0, Routing({{0, 8, 0.5}, {1, 1, 0.1}, {2, 6, 0.3}}),
                       HybriMoeCosts());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->gpu_hits, ElementsAre(0));
  EXPECT_THAT(p->gpu_loads, ElementsAre(2));
  EXPECT_THAT(p->cpu, ElementsAre(1));
  EXPECT_NEAR(p->split.gpu_finish_s, 1.0, 1e-12);
  EXPECT_NEAR(p->split.cpu_finish_s, 0.99, 1e-12);
  // S0 = 0.5·0.5 + 0.5·1.0 = 0.5 > S2 = 0.15: e2 is not kept in the one slot.
  EXPECT_THAT(p->admitted, IsEmpty());
  EXPECT_EQ(r.Stats().total.cpu_computed, 1);
  EXPECT_EQ(r.Stats().total.gpu_computed, 3);
}

// Step s routes every token to e(s mod 4) at layer 0 and e(s mod 4 + 4) at
// layer 1: four distinct experts cycle through two slots per layer.
LayerRouting CycleRouting(int s, int layer, std::vector<int>& ids) {
  const int e = s % 4 + 4 * layer;
  ids = {e};
  LayerRouting r = Routing({{e, 1, 1.0}});
  r.token_experts = ids;
  r.top_k = 1;
  return r;
}

TEST(ExpertResidency, CorrelatedLayerPairIsPrefetched) {
  // 2 layers, 8 experts, 2 slots, prefetch budget 1.
  ExpertResidency r = Make(2, 8, 2, 1);
  std::vector<int> ids0, ids1;
  // Steps 0-3: the table learns 0→4, 1→5, 2→6, 3→7 but never saw the row
  // it is asked about; the score cache's only positive non-resident
  // candidate (step 3: e4 at 0.125) does not beat the coldest resident (e5
  // at 0.25). No prefetch; layer 1 misses every time (each newcomer, at 0.5,
  // displaces the oldest).
  for (int s = 0; s < 4; ++s) {
    auto p0 = r.PlanLayer(0, CycleRouting(s, 0, ids0), GpuOnlyCosts());
    ASSERT_TRUE(p0.ok()) << p0.status();
    EXPECT_THAT(p0->prefetch, IsEmpty()) << "step " << s;
    auto p1 = r.PlanLayer(1, CycleRouting(s, 1, ids1), GpuOnlyCosts());
    ASSERT_TRUE(p1.ok());
    EXPECT_THAT(p1->gpu_loads, ElementsAre(s + 4));
  }
  EXPECT_THAT(r.Resident(1), ElementsAre(6, 7));
  // Step 4: layer 0 routes e0; the table predicts e4 (score 1). Layer 1 is
  // full ({6: 0.25, 7: 0.5}); e6 is the coldest and not predicted, so it
  // makes room. Layer 1 then hits e4. Every later step goes the same way.
  for (int s = 4; s < 20; ++s) {
    auto p0 = r.PlanLayer(0, CycleRouting(s, 0, ids0), GpuOnlyCosts());
    ASSERT_TRUE(p0.ok());
    EXPECT_THAT(p0->prefetch, ElementsAre(s % 4 + 4)) << "step " << s;
    // The victim is the expert of two steps ago, the colder of the two.
    EXPECT_THAT(p0->prefetch_evictions, ElementsAre((s - 2) % 4 + 4));
    auto p1 = r.PlanLayer(1, CycleRouting(s, 1, ids1), GpuOnlyCosts());
    ASSERT_TRUE(p1.ok());
    EXPECT_THAT(p1->gpu_hits, ElementsAre(s % 4 + 4)) << "step " << s;
    EXPECT_THAT(p1->gpu_loads, IsEmpty());
    EXPECT_THAT(p1->prefetch, IsEmpty());  // the last layer prefetches none
  }
  const ExpertResidencyStats st = r.Stats();
  EXPECT_EQ(st.layers[1].hits, 16);
  EXPECT_EQ(st.layers[1].misses, 4);
  EXPECT_EQ(st.layers[1].prefetch_issued, 16);
  EXPECT_EQ(st.layers[1].prefetch_used, 16);
  EXPECT_EQ(st.layers[1].prefetch_wasted, 0);
  EXPECT_EQ(st.total.prefetch_issued, 16);
  EXPECT_DOUBLE_EQ(st.total.prefetch_precision(), 1.0);
  // The table: nothing predicted at steps 0-3 (4 actual experts missed),
  // then 16 right out of 16.
  EXPECT_EQ(st.transition.predicted, 16);
  EXPECT_EQ(st.transition.hits, 16);
  EXPECT_EQ(st.transition.actual, 20);
  EXPECT_DOUBLE_EQ(st.transition.precision(), 1.0);
  EXPECT_DOUBLE_EQ(st.transition.recall(), 0.8);

  // Without prefetch the same cycle never hits at layer 1.
  ExpertResidency plain = Make(2, 8, 2, 0);
  for (int s = 0; s < 20; ++s) {
    ASSERT_TRUE(
        plain.PlanLayer(0, CycleRouting(s, 0, ids0), GpuOnlyCosts()).ok());
    ASSERT_TRUE(
        plain.PlanLayer(1, CycleRouting(s, 1, ids1), GpuOnlyCosts()).ok());
  }
  EXPECT_EQ(plain.Stats().layers[1].hits, 0);
  EXPECT_EQ(plain.Stats().total.prefetch_issued, 0);
}

TEST(ExpertResidency, HitRateRisesOnARepeatedPattern) {
  // 2 layers, 16 experts, 4 slots, budget 2; the same three experts per
  // layer every step. Step 0 misses all six (and prefetches nothing: the
  // table and the scores are cold); the loads take free slots, so every
  // later step hits all six.
  ExpertResidency r = Make(2, 16, 4, 2);
  const std::vector<ExpertActivation> l0 = {
      {1, 3, 0.5}, {5, 2, 0.3}, {9, 1, 0.2}};
  const std::vector<ExpertActivation> l1 = {
      {2, 3, 0.5}, {6, 2, 0.3}, {10, 1, 0.2}};
  double first = -1;
  for (int s = 0; s < 10; ++s) {
    auto p0 = r.PlanLayer(0, Routing(l0), GpuOnlyCosts());
    ASSERT_TRUE(p0.ok());
    auto p1 = r.PlanLayer(1, Routing(l1), GpuOnlyCosts());
    ASSERT_TRUE(p1.ok());
    if (s == 0) first = r.Stats().total.hit_rate();
  }
  EXPECT_EQ(first, 0.0);
  const ExpertResidencyStats st = r.Stats();
  EXPECT_EQ(st.total.hits, 54);  // 9 steps × 6
  EXPECT_EQ(st.total.misses, 6);
  EXPECT_DOUBLE_EQ(st.total.hit_rate(), 0.9);
}

TEST(ExpertResidency, RandomRoutingInvariants) {
  constexpr int kLayers = 3, kExperts = 8, kCapacity = 3, kBudget = 2;
  ExpertResidencyOptions o;
  o.num_layers = kLayers;
  o.num_experts = kExperts;
  o.capacity_per_layer = kCapacity;
  o.prefetch_budget = kBudget;
  o.transition_decay = 0.99;
  auto made = ExpertResidency::Create(o);
  ASSERT_TRUE(made.ok());
  ExpertResidency& r = *made;
  std::mt19937 rng(1234);
  // Skewed routing: experts 0-2 are picked more often.
  std::discrete_distribution<int> pick({6, 5, 4, 1, 1, 1, 1, 1});
  std::uniform_int_distribution<int> ntok(1, 6);
  std::uniform_real_distribution<float> w(0.05f, 1.0f);
  int64_t activations = 0;
  for (int step = 0; step < 400; ++step) {
    const int tokens = ntok(rng);
    for (int l = 0; l < kLayers; ++l) {
      std::vector<int> ids;
      std::vector<float> weights;
      for (int t = 0; t < tokens; ++t) {
        const int a = pick(rng);
        int b = pick(rng);
        while (b == a) b = pick(rng);
        ids.insert(ids.end(), {a, b});
        weights.insert(weights.end(), {w(rng), w(rng)});
      }
      auto act = SummarizeRouting(kExperts, 2, ids, weights);
      ASSERT_TRUE(act.ok()) << act.status();
      LayerRouting routing;
      routing.activated = *act;
      routing.token_experts = ids;
      routing.top_k = 2;
      std::vector<bool> before(kExperts), before_next(kExperts);
      for (int e = 0; e < kExperts; ++e) {
        before[e] = r.IsResident(l, e);
        before_next[e] = l + 1 < kLayers && r.IsResident(l + 1, e);
      }
      auto p = r.PlanLayer(l, routing, HybriMoeCosts());
      ASSERT_TRUE(p.ok()) << p.status();
      activations += static_cast<int64_t>(act->size());

      // Every activated expert exactly once, on the GPU or the CPU.
      std::multiset<int> computed(p->gpu_hits.begin(), p->gpu_hits.end());
      computed.insert(p->gpu_loads.begin(), p->gpu_loads.end());
      computed.insert(p->cpu.begin(), p->cpu.end());
      std::multiset<int> want;
      for (const auto& a : *act) want.insert(a.expert);
      EXPECT_EQ(computed, want);
      for (int e : p->gpu_hits) EXPECT_TRUE(before[e]);
      for (int e : p->gpu_loads) EXPECT_FALSE(before[e]);
      for (int e : p->admitted) {
        EXPECT_TRUE(std::count(p->gpu_loads.begin(), p->gpu_loads.end(), e));
        EXPECT_TRUE(r.IsResident(l, e));
      }
      for (int e : p->evictions) {
        EXPECT_TRUE(before[e]);
        EXPECT_FALSE(r.IsResident(l, e));
      }
      EXPECT_LE(p->prefetch.size(), static_cast<size_t>(kBudget));
      if (l + 1 == kLayers) {
        EXPECT_TRUE(p->prefetch.empty());
      }
      for (int e : p->prefetch) {
        EXPECT_FALSE(before_next[e]);
        EXPECT_TRUE(r.IsResident(l + 1, e));
      }
      for (int e : p->prefetch_evictions) {
        EXPECT_TRUE(before_next[e]);
        EXPECT_FALSE(r.IsResident(l + 1, e));
      }
      for (int k = 0; k < kLayers; ++k) {
        EXPECT_LE(r.Resident(k).size(), static_cast<size_t>(kCapacity));
      }
    }
  }
  const ExpertResidencyStats st = r.Stats();
  EXPECT_EQ(st.total.activations, activations);
  EXPECT_EQ(st.total.hits + st.total.misses, activations);
  EXPECT_EQ(st.total.gpu_computed + st.total.cpu_computed, activations);
  EXPECT_LE(st.total.loads, st.total.misses);
  EXPECT_LE(st.total.prefetch_used + st.total.prefetch_wasted,
            st.total.prefetch_issued);
  EXPECT_EQ(st.total.plans, 400 * kLayers);
  EXPECT_GT(st.total.hits, 0);
  EXPECT_GT(st.total.prefetch_issued, 0);
  EXPECT_GE(st.transition.precision(), 0.0);
  EXPECT_LE(st.transition.precision(), 1.0);
  EXPECT_LE(st.resident, st.capacity);
  // The skew pays: more than half the activations hit.
  EXPECT_GT(st.total.hit_rate(), 0.5);
}

TEST(ExpertResidency, SummarizeRouting) {
  // Three tokens, top-2: {0,1}, {1,2}, {1,0}.
  const std::vector<int> ids = {0, 1, 1, 2, 1, 0};
  const std::vector<float> w = {0.6f, 0.4f, 0.75f, 0.25f, 0.5f, 0.5f};
  auto a = SummarizeRouting(4, 2, ids, w);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 3u);
  EXPECT_EQ((*a)[0].expert, 0);
  EXPECT_EQ((*a)[0].tokens, 2);
  EXPECT_NEAR((*a)[0].score, (0.6 + 0.5) / 3, 1e-6);
  EXPECT_EQ((*a)[1].expert, 1);
  EXPECT_EQ((*a)[1].tokens, 3);
  EXPECT_NEAR((*a)[1].score, (0.4 + 0.75 + 0.5) / 3, 1e-6);
  EXPECT_EQ((*a)[2].expert, 2);
  EXPECT_NEAR((*a)[2].score, 0.25 / 3, 1e-6);
  // No weights: the share of the tokens.
  auto b = SummarizeRouting(4, 2, ids);
  ASSERT_TRUE(b.ok());
  EXPECT_NEAR((*b)[1].score, 1.0, 1e-12);
  EXPECT_NEAR((*b)[2].score, 1.0 / 3, 1e-12);
  EXPECT_TRUE(SummarizeRouting(4, 2, {})->empty());

  using absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(SummarizeRouting(0, 2, ids).status().code(), kInvalidArgument);
  EXPECT_EQ(SummarizeRouting(4, 0, ids).status().code(), kInvalidArgument);
  EXPECT_EQ(SummarizeRouting(4, 4, ids).status().code(), kInvalidArgument);
  EXPECT_EQ(SummarizeRouting(2, 2, ids).status().code(), kInvalidArgument);
  EXPECT_EQ(SummarizeRouting(4, 2, {1, 1}).status().code(), kInvalidArgument);
  EXPECT_EQ(SummarizeRouting(4, 2, ids, {0.5f}).status().code(),
            kInvalidArgument);
  std::vector<float> bad = w;
  bad[3] = -1;
  EXPECT_EQ(SummarizeRouting(4, 2, ids, bad).status().code(), kInvalidArgument);
  bad[3] = std::nanf("");
  EXPECT_EQ(SummarizeRouting(4, 2, ids, bad).status().code(), kInvalidArgument);
}

TEST(ExpertResidency, RejectsBadOptions) {
  using absl::StatusCode::kInvalidArgument;
  ExpertResidencyOptions good;
  good.num_layers = 2;
  good.num_experts = 4;
  good.capacity_per_layer = 2;
  ASSERT_TRUE(ExpertResidency::Create(good).ok());
  auto with = [&](auto change) {
    ExpertResidencyOptions o = good;
    change(o);
    return ExpertResidency::Create(o).status().code();
  };
  EXPECT_EQ(with([](auto& o) { o.num_layers = 0; }), kInvalidArgument);
  EXPECT_EQ(with([](auto& o) { o.num_experts = 0; }), kInvalidArgument);
  EXPECT_EQ(with([](auto& o) { o.capacity_per_layer = -1; }), kInvalidArgument);
  EXPECT_EQ(with([](auto& o) { o.capacity_per_layer = 5; }), kInvalidArgument);
  EXPECT_EQ(with([](auto& o) { o.alpha = 0; }), kInvalidArgument);
  EXPECT_EQ(with([](auto& o) { o.transition_decay = 1.5; }), kInvalidArgument);
  EXPECT_EQ(with([](auto& o) { o.prefetch_budget = -1; }), kInvalidArgument);
}

TEST(ExpertResidency, RejectsBadRoutingWithoutChangingState) {
  using absl::StatusCode::kInvalidArgument;
  ExpertResidency r = Make(2, 4, 2, 1);
  ASSERT_TRUE(r.PlanLayer(0, Routing({{1, 2, 0.5}}), GpuOnlyCosts()).ok());
  const ExpertResidencyStats before = r.Stats();

  auto code = [&](int layer, const LayerRouting& routing,
                  const ExpertCosts& costs) {
    return r.PlanLayer(layer, routing, costs).status().code();
  };
  const ExpertCosts ok = GpuOnlyCosts();
  EXPECT_EQ(code(-1, Routing({{0, 1, 0.5}}), ok), kInvalidArgument);
  EXPECT_EQ(code(2, Routing({{0, 1, 0.5}}), ok), kInvalidArgument);
  EXPECT_EQ(code(0, Routing({{4, 1, 0.5}}), ok), kInvalidArgument);
  EXPECT_EQ(code(0, Routing({{-1, 1, 0.5}}), ok), kInvalidArgument);
  EXPECT_EQ(code(0, Routing({{0, 1, 0.5}, {0, 2, 0.5}}), ok), kInvalidArgument);
  EXPECT_EQ(code(0, Routing({{0, 0, 0.5}}), ok), kInvalidArgument);
  EXPECT_EQ(code(0, Routing({{0, 1, -0.5}}), ok), kInvalidArgument);
  EXPECT_EQ(code(0, Routing({{0, 1, std::nan("")}}), ok), kInvalidArgument);
  // Token routing: bad top_k, bad shape, bad id, disagreeing counts.
  std::vector<int> ids = {0, 1};
  LayerRouting t = Routing({{0, 1, 0.5}, {1, 1, 0.5}});
  t.token_experts = ids;
  t.top_k = 0;
  EXPECT_EQ(code(0, t, ok), kInvalidArgument);
  t.top_k = 3;
  EXPECT_EQ(code(0, t, ok), kInvalidArgument);
  ids = {0, 7};
  t.top_k = 2;
  EXPECT_EQ(code(0, t, ok), kInvalidArgument);
  ids = {0, 0};
  EXPECT_EQ(code(0, t, ok), kInvalidArgument);
  ids = {0, 2};
  EXPECT_EQ(code(0, t, ok), kInvalidArgument);
  // Costs the split rejects: missing, or a negative time.
  EXPECT_EQ(code(0, Routing({{0, 1, 0.5}}), ExpertCosts{}), kInvalidArgument);
  ExpertCosts negative = GpuOnlyCosts();
  negative.gpu_compute_s = [](int64_t) { return -1.0; };
  EXPECT_EQ(code(0, Routing({{0, 1, 0.5}}), negative), kInvalidArgument);

  const ExpertResidencyStats after = r.Stats();
  EXPECT_EQ(after.total.plans, before.total.plans);
  EXPECT_EQ(after.total.activations, before.total.activations);
  EXPECT_EQ(after.resident, before.resident);
  EXPECT_THAT(r.Resident(0), ElementsAre(1));
  EXPECT_DOUBLE_EQ(r.score_cache().score(0, 1), 0.25);
  // The valid routing still goes through.
  ids = {0, 1};
  ASSERT_TRUE(r.PlanLayer(0, t, ok).ok());
}

}  // namespace
}  // namespace tandem
