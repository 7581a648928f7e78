#include "gpu_worker/experts/expert_residency_stats.h"

#include <string>

#include "gmock/gmock.h"
#include "gpu_worker/experts/expert_residency.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ExpertResidencyStats, RatiosAndSums) {
  LayerResidencyStats a;
  EXPECT_EQ(a.hit_rate(), 0);
  EXPECT_EQ(a.prefetch_precision(), 0);
  a.activations = 4;
  a.hits = 3;
  a.misses = 1;
  a.prefetch_issued = 2;
  a.prefetch_used = 1;
  EXPECT_DOUBLE_EQ(a.hit_rate(), 0.75);
  EXPECT_DOUBLE_EQ(a.prefetch_precision(), 0.5);
  LayerResidencyStats b = a;
  b.evictions = 5;
  b.Add(a);
  EXPECT_EQ(b.activations, 8);
  EXPECT_EQ(b.hits, 6);
  EXPECT_EQ(b.prefetch_issued, 4);
  EXPECT_EQ(b.evictions, 5);
}

TEST(ExpertResidencyStats, PrometheusText) {
  ExpertResidencyStats s;
  s.layers.resize(2);
  s.layers[0].activations = 3;
  s.layers[0].hits = 1;
  s.layers[0].misses = 2;
  s.layers[1].activations = 2;
  s.layers[1].hits = 2;
  s.layers[1].prefetch_issued = 4;
  s.layers[1].prefetch_used = 3;
  for (const auto& l : s.layers) s.total.Add(l);
  s.resident = 3;
  s.capacity = 4;
  s.transition.predicted = 4;
  s.transition.hits = 2;
  s.transition.actual = 8;

  const std::string text = RenderPrometheus(s);
  EXPECT_THAT(text, HasSubstr("# TYPE tandem_expert_cache_hits_total counter\n"
                              "tandem_expert_cache_hits_total 3\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_cache_misses_total 2\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_prefetch_issued_total 4\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_prefetch_used_total 3\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_prefetch_wasted_total 0\n"));
  EXPECT_THAT(
      text, HasSubstr("\ntandem_expert_layer_cache_hits_total{layer=\"0\"} 1\n"
                      "tandem_expert_layer_cache_hits_total{layer=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tandem_expert_cache_resident gauge\n"
                              "tandem_expert_cache_resident 3\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_cache_hit_ratio 0.6\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_prefetch_precision 0.75\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_transition_precision 0.5\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_transition_recall 0.25\n"));
  // Every line is a comment or "name[{labels}] value".
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    ASSERT_NE(end, std::string::npos);
    const std::string line = text.substr(start, end - start);
    if (line[0] != '#') {
      EXPECT_EQ(line.rfind("tandem_expert_", 0), 0u) << line;
      EXPECT_NE(line.find(' '), std::string::npos) << line;
    }
    start = end + 1;
  }

  // Custom prefix and common labels.
  const std::string labelled = RenderPrometheus(s, "w", "rank=\"1\"");
  EXPECT_THAT(labelled, HasSubstr("\nw_cache_hits_total{rank=\"1\"} 3\n"));
  EXPECT_THAT(
      labelled,
      HasSubstr("\nw_layer_cache_misses_total{rank=\"1\",layer=\"0\"} 2\n"));
  EXPECT_THAT(labelled, Not(HasSubstr("tandem_expert")));
}

TEST(ExpertResidencyStats, ResidencyRendersItsOwnStats) {
  ExpertResidencyOptions o;
  o.num_layers = 1;
  o.num_experts = 2;
  o.capacity_per_layer = 1;
  auto r = ExpertResidency::Create(o);
  ASSERT_TRUE(r.ok());
  experts::ExpertCosts costs;
  costs.gpu_compute_s = [](int64_t) { return 1.0; };
  costs.cpu_compute_s = [](int64_t) { return 100.0; };
  LayerRouting routing;
  routing.activated = {{0, 1, 1.0}};
  ASSERT_TRUE(r->PlanLayer(0, routing, costs).ok());
  ASSERT_TRUE(r->PlanLayer(0, routing, costs).ok());
  const std::string text = r->RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_cache_hits_total 1\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_cache_misses_total 1\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_cache_loads_total 1\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_expert_cache_capacity 1\n"));
}

}  // namespace
}  // namespace tandem
