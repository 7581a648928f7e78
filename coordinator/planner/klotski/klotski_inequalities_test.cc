#include "coordinator/planner/klotski/klotski_inequalities.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tandem::planner {
namespace {

constexpr double kMs = 1e-3;

// A hand-made block (times in ms): t_cA 2, t_cG 0.5, t_c,hot 3, two cold
// experts of 1 each, t_IO,G 1, t_IO,E 10, t_IO,A 2, K = 2.
KlotskiLayerTimes Block() {
  KlotskiLayerTimes t;
  t.attention_s = 2 * kMs;
  t.gate_s = 0.5 * kMs;
  t.hot_compute_s = 3 * kMs;
  t.cold_compute_s = {1 * kMs, 1 * kMs};
  t.gate_io_s = 1 * kMs;
  t.expert_io_s = 10 * kMs;
  t.attention_io_s = 2 * kMs;
  t.hot_experts = 2;
  return t;
}

TEST(KlotskiInequalities, WorkedExampleAtTen) {
  // n = 10: front = 10·(2 + 0.5) = 25.
  //  (I)   10·2 − 1               = 19
  //  (II)  25 − (1 + 2·10)        = 4
  //  (III) 25 + 3 − (1 + 3·10)    = −3
  //  (IV)  prefix m=2: 25 + 3 + 1 − (1 + 4·10) = −12;
  //        end: 25 + 3 + 2 − (1 + 4·10 + 2) = −13  → min −13
  auto c = CheckKlotskiInequalities(Block(), 10);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->slack_s[0], 19 * kMs, 1e-12);
  EXPECT_NEAR(c->slack_s[1], 4 * kMs, 1e-12);
  EXPECT_NEAR(c->slack_s[2], -3 * kMs, 1e-12);
  EXPECT_NEAR(c->slack_s[3], -13 * kMs, 1e-12);
  EXPECT_TRUE(c->holds(KlotskiDeadline::kGate));
  EXPECT_TRUE(c->holds(KlotskiDeadline::kHotExperts));
  EXPECT_FALSE(c->holds(KlotskiDeadline::kFirstCold));
  EXPECT_FALSE(c->holds(KlotskiDeadline::kNextAttention));
  EXPECT_FALSE(c->all());
  EXPECT_NE(c->FirstFailure().find("(III)"), std::string::npos)
      << c->FirstFailure();
}

TEST(KlotskiInequalities, SmallestNIsSixteen) {
  // (IV)'s end condition is the binding one: 2.5·n + 5 ≥ 43 ⇔ n ≥ 15.2.
  // n = 16: 40 + 5 − 43 = +2; n = 15: 37.5 + 5 − 43 = −0.5 (only (IV) fails:
  // (III) is 37.5 + 3 − 31 = 9.5, prefix m=2 is 41.5 − 41 = 0.5).
  auto at16 = CheckKlotskiInequalities(Block(), 16);
  ASSERT_TRUE(at16.ok());
  EXPECT_TRUE(at16->all()) << at16->ToString();
  EXPECT_NEAR(at16->slack_s[3], 2 * kMs, 1e-12);

  auto at15 = CheckKlotskiInequalities(Block(), 15);
  ASSERT_TRUE(at15.ok());
  EXPECT_TRUE(at15->holds(KlotskiDeadline::kGate));
  EXPECT_TRUE(at15->holds(KlotskiDeadline::kHotExperts));
  EXPECT_NEAR(at15->slack_s[2], 9.5 * kMs, 1e-12);
  EXPECT_NEAR(at15->slack_s[3], -0.5 * kMs, 1e-12);
  EXPECT_FALSE(at15->all());
}

TEST(KlotskiInequalities, EveryPrefixOfTheColdQueueCounts) {
  // t_cA 1, no gate, no hot work, K = 1, t_IO,E 10, cold computes [0, 30].
  // n = 25: (III) 25 − 2·10 = 5; cold #2 starts at 25 + 0 but needs
  // 3·10 = 30 of transfers: −5, though the end (25 + 30 − 30 = 25) is fine.
  KlotskiLayerTimes t;
  t.attention_s = 1 * kMs;
  t.expert_io_s = 10 * kMs;
  t.cold_compute_s = {0, 30 * kMs};
  t.hot_experts = 1;
  auto c = CheckKlotskiInequalities(t, 25);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->slack_s[2], 5 * kMs, 1e-12);
  EXPECT_NEAR(c->slack_s[3], -5 * kMs, 1e-12);
}

TEST(KlotskiInequalities, NoColdExpertsIsTheBestCase) {
  // Every token picks a hot expert: (III) is vacuous and (IV) only asks the
  // hot compute to cover the next attention's weights.
  KlotskiLayerTimes t = Block();
  t.cold_compute_s.clear();
  auto c = CheckKlotskiInequalities(t, 10);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(std::isinf(c->slack_s[2]));
  EXPECT_TRUE(c->holds(KlotskiDeadline::kFirstCold));
  // (IV): 25 + 3 − (1 + 2·10 + 2) = 5.
  EXPECT_NEAR(c->slack_s[3], 5 * kMs, 1e-12);
  EXPECT_TRUE(c->all());
}

TEST(KlotskiInequalities, GateDeadlineUsesAttentionOnly) {
  // (I) has no gate term: n·t_cA ≥ t_IO,G. With t_IO,G = 9 and t_cA = 2,
  // n = 4 gives 8 − 9 = −1 while (II) is irrelevant here.
  KlotskiLayerTimes t = Block();
  t.gate_io_s = 9 * kMs;
  auto c = CheckKlotskiInequalities(t, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->slack_s[0], -1 * kMs, 1e-12);
  EXPECT_FALSE(c->holds(KlotskiDeadline::kGate));
}

TEST(KlotskiInequalities, RejectsBadInput) {
  EXPECT_EQ(CheckKlotskiInequalities(Block(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  KlotskiLayerTimes t = Block();
  t.expert_io_s = -1;
  EXPECT_EQ(CheckKlotskiInequalities(t, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  t = Block();
  t.cold_compute_s.push_back(std::nan(""));
  EXPECT_EQ(CheckKlotskiInequalities(t, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::planner
