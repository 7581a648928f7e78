#include "common/experts/expert_transition_table.h"

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::experts {
namespace {

ExpertTransitionTable Make(int layers, int experts,
                           double decay = ExpertTransitionTable::kNoDecay) {
  auto t = ExpertTransitionTable::Create(layers, experts, decay);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(ExpertTransitionTable, CountsAndTokenWeightedPrediction) {
  ExpertTransitionTable t = Make(/*layers=*/2, /*experts=*/4);
  // top-1, four tokens: 0→2, 0→2, 0→3, 1→3.
  ASSERT_TRUE(t.ObserveStep(0, {0, 0, 0, 1}, {2, 2, 3, 3}, 1).ok());
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 2), 2);
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 3), 1);
  EXPECT_DOUBLE_EQ(t.Count(0, 1, 3), 1);
  EXPECT_DOUBLE_EQ(t.Count(0, 1, 2), 0);
  EXPECT_DOUBLE_EQ(t.Popularity(0, 0), 3);  // layer 0 from pair 0's "from"
  EXPECT_DOUBLE_EQ(t.Popularity(1, 3), 2);  // layer 1 from pair 0's "to"

  // One token on expert 0: row 0 / rowsum 3 -> e2 = 2/3, e3 = 1/3; the rest
  // have neither transitions nor popularity: index order.
  auto p = t.PredictScored(0, {{0, 1}}, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 4u);
  EXPECT_EQ((*p)[0].expert, 2);
  EXPECT_DOUBLE_EQ((*p)[0].score, 2.0 / 3);
  EXPECT_EQ((*p)[0].basis, PredictionBasis::kTransition);
  EXPECT_EQ((*p)[1].expert, 3);
  EXPECT_DOUBLE_EQ((*p)[1].score, 1.0 / 3);
  EXPECT_EQ((*p)[2].expert, 0);
  EXPECT_EQ((*p)[2].basis, PredictionBasis::kIndexOrder);
  EXPECT_EQ((*p)[3].expert, 1);

  // Add three tokens on expert 1 (row 1: all to e3): e3 = 1/3 + 3 = 3.33
  // beats e2 = 2/3.
  auto q = t.Predict(0, {{0, 1}, {1, 3}}, 2);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, (std::vector<int>{3, 2}));
  // count is capped at the expert count; 0 is an empty answer.
  EXPECT_EQ(t.Predict(0, {{0, 1}}, 99)->size(), 4u);
  EXPECT_TRUE(t.Predict(0, {{0, 1}}, 0)->empty());
}

TEST(ExpertTransitionTable, TopKCountsEveryPair) {
  ExpertTransitionTable t = Make(3, 4);
  // One token, top-2: {0,1} at layer 1 then {2,3} at layer 2 -> four pairs.
  ASSERT_TRUE(t.ObserveStep(1, {0, 1}, {2, 3}, 2).ok());
  for (int i : {0, 1}) {
    for (int j : {2, 3}) EXPECT_DOUBLE_EQ(t.Count(1, i, j), 1);
  }
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 2), 0);  // other pairs untouched
  // Row 0 sums to 2 (k pairs per token): one token votes 1/2 to e2 and e3;
  // equal scores go to the lower index.
  auto p = t.PredictScored(1, {{0, 1}}, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].expert, 2);
  EXPECT_DOUBLE_EQ((*p)[0].score, 0.5);
  EXPECT_EQ((*p)[1].expert, 3);
  EXPECT_DOUBLE_EQ((*p)[1].score, 0.5);
  // Pair 1 feeds layer 2's popularity only (layer 0 is fed by pair 0).
  EXPECT_DOUBLE_EQ(t.Popularity(2, 2), 1);
  EXPECT_DOUBLE_EQ(t.Popularity(1, 0), 0);
  EXPECT_DOUBLE_EQ(t.Popularity(0, 0), 0);
}

TEST(ExpertTransitionTable, FallsBackToPopularityThenIndexOrder) {
  ExpertTransitionTable t = Make(2, 4);
  // Empty table: index order.
  EXPECT_EQ(*t.Predict(0, {{1, 5}}, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*t.Predict(0, {}, 2), (std::vector<int>{0, 1}));
  // 0→3 twice, 0→1 once. Expert 2 at layer 0 has no row: its tokens fall
  // back to layer 1's popularity (e3 = 2, e1 = 1), then index order.
  ASSERT_TRUE(t.ObserveStep(0, {0, 0, 0}, {3, 3, 1}, 1).ok());
  auto p = t.PredictScored(0, {{2, 7}}, 4);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].expert, 3);
  EXPECT_EQ((*p)[0].basis, PredictionBasis::kPopularity);
  EXPECT_DOUBLE_EQ((*p)[0].score, 2);
  EXPECT_EQ((*p)[1].expert, 1);
  EXPECT_EQ((*p)[2].expert, 0);
  EXPECT_EQ((*p)[2].basis, PredictionBasis::kIndexOrder);
  EXPECT_EQ((*p)[3].expert, 2);
  // Layer 0 has no previous layer: popularity alone.
  EXPECT_EQ(*t.PredictByPopularity(0, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*t.PredictByPopularity(1, 2), (std::vector<int>{3, 1}));
}

TEST(ExpertTransitionTable, DecayTracksDrift) {
  // decay 0.5: step 1's 0→1 weighs 0.5 after step 2's 0→2.
  ExpertTransitionTable t = Make(2, 3, 0.5);
  ASSERT_TRUE(t.ObserveStep(0, {0}, {1}, 1).ok());
  ASSERT_TRUE(t.ObserveStep(0, {0}, {2}, 1).ok());
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 1), 0.5);
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 2), 1);
  EXPECT_DOUBLE_EQ(t.Popularity(0, 0), 1.5);
  EXPECT_EQ(*t.Predict(0, {{0, 1}}, 1), (std::vector<int>{2}));
  // An empty step is not a step: no decay.
  ASSERT_TRUE(t.ObserveStep(0, {}, {}, 1).ok());
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 2), 1);

  // Without decay the two tie and the lower index wins.
  ExpertTransitionTable plain = Make(2, 3);
  ASSERT_TRUE(plain.ObserveStep(0, {0}, {1}, 1).ok());
  ASSERT_TRUE(plain.ObserveStep(0, {0}, {2}, 1).ok());
  EXPECT_EQ(*plain.Predict(0, {{0, 1}}, 1), (std::vector<int>{1}));
}

TEST(ExpertTransitionTable, LazyDecaySurvivesLongRuns) {
  // 0.5^-3000 would overflow a double many times over; the scale is folded
  // back. The steady-state count of a transition seen every step is
  // Σ 0.5^s = 2.
  ExpertTransitionTable t = Make(2, 2, 0.5);
  for (int s = 0; s < 3000; ++s) {
    ASSERT_TRUE(t.ObserveStep(0, {0}, {1}, 1).ok());
  }
  EXPECT_NEAR(t.Count(0, 0, 1), 2.0, 1e-9);
  EXPECT_NEAR(t.Popularity(1, 1), 2.0, 1e-9);
  EXPECT_NEAR(t.Popularity(0, 0), 2.0, 1e-9);
  EXPECT_EQ(*t.Predict(0, {{0, 1}}, 1), (std::vector<int>{1}));
}

TEST(ExpertTransitionTable, LearnsAStrongCorrelation) {
  // Layer-1 choice = (3·i + 1) mod 16 of the layer-0 choice, 10% noise;
  // top-2. After learning, the top-2 prediction for a token finds both of
  // its next-layer experts almost always.
  constexpr int kE = 16;
  ExpertTransitionTable t = Make(2, kE);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, kE - 1);
  std::uniform_real_distribution<double> u(0, 1);
  auto follow = [&](int i) {
    return u(rng) < 0.1 ? pick(rng) : (3 * i + 1) % kE;
  };
  auto token = [&](std::vector<int>& from, std::vector<int>& to) {
    int a = pick(rng), b = pick(rng);
    while (b == a) b = pick(rng);
    int c = follow(a), d = follow(b);
    while (d == c) d = pick(rng);
    from = {a, b};
    to = {c, d};
  };
  for (int s = 0; s < 200; ++s) {
    std::vector<int> from, to, all_from, all_to;
    for (int n = 0; n < 8; ++n) {
      token(from, to);
      all_from.insert(all_from.end(), from.begin(), from.end());
      all_to.insert(all_to.end(), to.begin(), to.end());
    }
    ASSERT_TRUE(t.ObserveStep(0, all_from, all_to, 2).ok());
  }
  for (int s = 0; s < 200; ++s) {
    std::vector<int> from, to;
    token(from, to);
    auto p = t.Predict(0, {{from[0], 1}, {from[1], 1}}, 2);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(t.RecordOutcome(*p, to).ok());
  }
  EXPECT_GT(t.accuracy().recall(), 0.8);
  EXPECT_GT(t.accuracy().precision(), 0.8);
  EXPECT_EQ(t.accuracy().outcomes, 200);
}

TEST(ExpertTransitionTable, AccuracyBookkeeping) {
  ExpertTransitionTable t = Make(2, 4);
  EXPECT_EQ(t.accuracy().precision(), 0);
  EXPECT_EQ(t.accuracy().recall(), 0);
  // {1,2} vs {2,3}: 1 hit of 2 predicted, 2 actual.
  ASSERT_TRUE(t.RecordOutcome({1, 2}, {2, 3}).ok());
  // Nothing predicted, {0} activated; duplicates count once.
  ASSERT_TRUE(t.RecordOutcome({}, {0, 0}).ok());
  EXPECT_EQ(t.accuracy().predicted, 2);
  EXPECT_EQ(t.accuracy().actual, 3);
  EXPECT_EQ(t.accuracy().hits, 1);
  EXPECT_DOUBLE_EQ(t.accuracy().precision(), 0.5);
  EXPECT_DOUBLE_EQ(t.accuracy().recall(), 1.0 / 3);
  EXPECT_EQ(t.RecordOutcome({4}, {0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.RecordOutcome({0}, {-1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.accuracy().outcomes, 2);  // the bad calls recorded nothing
}

TEST(ExpertTransitionTable, RejectsBadInput) {
  using absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(ExpertTransitionTable::Create(0, 4).status().code(),
            kInvalidArgument);
  EXPECT_EQ(ExpertTransitionTable::Create(2, 0).status().code(),
            kInvalidArgument);
  EXPECT_EQ(ExpertTransitionTable::Create(2, 4, 0).status().code(),
            kInvalidArgument);
  EXPECT_EQ(ExpertTransitionTable::Create(2, 4, 1.5).status().code(),
            kInvalidArgument);
  EXPECT_EQ(ExpertTransitionTable::Create(2, 4, std::nan("")).status().code(),
            kInvalidArgument);

  ExpertTransitionTable t = Make(3, 4);
  ASSERT_TRUE(t.ObserveStep(0, {0}, {1}, 1).ok());
  // Layers: pairs are 0 and 1 only.
  EXPECT_EQ(t.ObserveStep(-1, {0}, {1}, 1).code(), kInvalidArgument);
  EXPECT_EQ(t.ObserveStep(2, {0}, {1}, 1).code(), kInvalidArgument);
  // Shapes.
  EXPECT_EQ(t.ObserveStep(0, {0}, {1}, 0).code(), kInvalidArgument);
  EXPECT_EQ(t.ObserveStep(0, {0, 1}, {1}, 1).code(), kInvalidArgument);
  EXPECT_EQ(t.ObserveStep(0, {0, 1, 2}, {1, 2, 3}, 2).code(), kInvalidArgument);
  // Ids: out of range on either side (after valid tokens), twice in a row.
  EXPECT_EQ(t.ObserveStep(0, {0, 4}, {1, 1}, 1).code(), kInvalidArgument);
  EXPECT_EQ(t.ObserveStep(0, {0, 0}, {1, -1}, 1).code(), kInvalidArgument);
  EXPECT_EQ(t.ObserveStep(0, {0, 0}, {1, 2}, 2).code(), kInvalidArgument);
  // None of the rejected calls changed the table.
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 1), 1);
  EXPECT_DOUBLE_EQ(t.Count(0, 0, 2), 0);
  EXPECT_DOUBLE_EQ(t.Popularity(1, 1), 1);
  EXPECT_DOUBLE_EQ(t.Popularity(0, 0), 1);

  EXPECT_EQ(t.Predict(2, {{0, 1}}, 1).status().code(), kInvalidArgument);
  EXPECT_EQ(t.Predict(-1, {{0, 1}}, 1).status().code(), kInvalidArgument);
  EXPECT_EQ(t.Predict(0, {{0, 1}}, -1).status().code(), kInvalidArgument);
  EXPECT_EQ(t.Predict(0, {{4, 1}}, 1).status().code(), kInvalidArgument);
  EXPECT_EQ(t.Predict(0, {{0, -1}}, 1).status().code(), kInvalidArgument);
  EXPECT_EQ(t.Predict(0, {{0, 1}, {0, 2}}, 1).status().code(),
            kInvalidArgument);
  EXPECT_EQ(t.PredictByPopularity(3, 1).status().code(), kInvalidArgument);
  EXPECT_EQ(t.PredictByPopularity(0, -1).status().code(), kInvalidArgument);
  // Out-of-range reads are 0, not a crash.
  EXPECT_EQ(t.Count(5, 0, 0), 0);
  EXPECT_EQ(t.Count(0, 0, 9), 0);
  EXPECT_EQ(t.Popularity(-1, 0), 0);

  // A one-layer model has no pair, but popularity still answers.
  ExpertTransitionTable one = Make(1, 3);
  EXPECT_EQ(one.ObserveStep(0, {0}, {1}, 1).code(), kInvalidArgument);
  EXPECT_EQ(one.Predict(0, {}, 1).status().code(), kInvalidArgument);
  EXPECT_EQ(*one.PredictByPopularity(0, 2), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace tandem::experts
