#include "coordinator/planner/scheinfer/rate_solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::planner::scheinfer {
namespace {

GemmShape Shape(int n_l, double tokens = 1) {
  GemmShape s;
  s.num_gemms = n_l;
  s.elements = 1e6;
  s.weight_bytes = 1e6;
  s.tokens = tokens;
  return s;
}

// Brute force: the best simulated t_fin over a fine grid of r_CG.
double GridBest(const CostModel& m, const GemmShape& s, double r_gg,
                int points) {
  double best = std::numeric_limits<double>::infinity();
  const double hi = 1 - r_gg;
  for (int i = 0; i <= points; ++i) {
    const double x = hi * i / points;
    absl::StatusOr<double> t = SimulateMlpLayer(
        DecodeStreamTimes(m, s, {r_gg, x, std::max(0.0, hi - x)}), s.num_gemms);
    EXPECT_TRUE(t.ok());
    best = std::min(best, *t);
  }
  return best;
}

// With every α and the launch cost 0, n_l = 3, r_GG = 0:
//   t_C2G = x·1e6·1e-9 = 1e-3·x, t_G = x·1e6·1e-11 = 1e-5·x,
//   t_C = (1 − x)·1e6·1e-9 = 1e-3·(1 − x).
// Copy-bound (t_C2G > t_G): τ_G = t_C2G + t_G + 2·t_C2G = 3.01e-3·x;
// τ_C = 3e-3·(1 − x). They cross at x = 3 / 6.01 = 0.499168..., where
// t_fin = 3.01e-3 · 3 / 6.01 = 1.502496e-3.
TEST(Stage1Test, BalancePointByHand) {
  CostModel m;
  m.h2d = {0, 1e-9};
  m.gpu = {0, 1e-11};
  m.cpu = {0, 1e-9};
  absl::StatusOr<Stage1Result> r = SolveStage1(m, Shape(3), 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->r_cg, 3 / 6.01, 1e-12);
  EXPECT_NEAR(r->t_fin, 3.01e-3 * 3 / 6.01, 1e-15);
  EXPECT_EQ(r->regime, Regime::kCopyBound);
}

// Every candidate is an end of the range or a crossing of two of the four
// lines (three GPU-side case lines and the CPU line).
TEST(Stage1Test, CandidatesAreBreakpoints) {
  CostModel m;
  m.launch_s = 3e-5;
  m.h2d = {2e-6, 1e-9};
  m.gpu = {1e-6, 2e-10};
  m.cpu = {1e-6, 1e-9};
  const GemmShape s = Shape(4);
  const double r_gg = 0.25;
  const StreamLines l = Stage1Lines(m, s, r_gg);
  const std::vector<double> xs =
      BreakpointCandidates(l, s.num_gemms, 0, 1 - r_gg);
  ASSERT_GE(xs.size(), 3u);
  EXPECT_EQ(xs.front(), 0);
  EXPECT_EQ(xs.back(), 1 - r_gg);
  const double k = s.num_gemms - 1;
  for (size_t i = 1; i + 1 < xs.size(); ++i) {
    const double x = xs[i];
    const double sum = l.launch.At(x) + l.copy.At(x) + l.gpu.At(x);
    const std::vector<double> v = {
        sum + k * l.launch.At(x), sum + k * l.copy.At(x), sum + k * l.gpu.At(x),
        s.num_gemms * l.cpu.At(x)};
    bool crossing = false;
    for (size_t a = 0; a < v.size(); ++a) {
      for (size_t b = a + 1; b < v.size(); ++b) {
        crossing |= std::abs(v[a] - v[b]) < 1e-15;
      }
    }
    EXPECT_TRUE(crossing) << "x = " << x;
  }
  // The lines match Eq. 4 strictly inside the range.
  const double x = 0.4;
  const StreamTimes t = DecodeStreamTimes(m, s, {r_gg, x, 1 - r_gg - x});
  EXPECT_NEAR(l.launch.At(x), t.launch, 1e-18);
  EXPECT_NEAR(l.copy.At(x), t.copy, 1e-18);
  EXPECT_NEAR(l.gpu.At(x), t.gpu, 1e-18);
  EXPECT_NEAR(l.cpu.At(x), t.cpu, 1e-18);
}

// The breakpoint method is exact: no r_CG on a fine grid does better, in
// every regime and at every r_GG.
TEST(Stage1Test, NoGridPointBeatsTheBreakpoints) {
  struct Case {
    const char* name;
    double launch, copy_beta, gpu_beta, cpu_beta;
  };
  const Case cases[] = {
      {"copy-bound", 1e-5, 1e-9, 1e-11, 1e-9},
      {"gpu-bound", 1e-5, 1e-10, 1e-9, 1e-9},
      {"launch-bound", 5e-4, 1e-10, 1e-11, 1e-9},
      {"slow cpu", 1e-5, 1e-9, 1e-11, 1e-8},
      {"fast cpu", 1e-5, 1e-9, 1e-11, 1e-11},
  };
  for (const Case& c : cases) {
    CostModel m;
    m.launch_s = c.launch;
    m.h2d = {3e-6, c.copy_beta};
    m.gpu = {1e-7, c.gpu_beta};
    m.cpu = {5e-6, c.cpu_beta};
    for (double r_gg : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      absl::StatusOr<Stage1Result> r = SolveStage1(m, Shape(6), r_gg);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_GE(r->r_cg, 0);
      EXPECT_LE(r->r_cg, 1 - r_gg + 1e-15);
      EXPECT_LE(r->t_fin, GridBest(m, Shape(6), r_gg, 4000) + 1e-15)
          << c.name << " r_gg " << r_gg;
    }
  }
}

TEST(Stage1Test, Errors) {
  CostModel m;
  EXPECT_EQ(SolveStage1(m, Shape(3), -0.1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SolveStage1(m, Shape(3), 1.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SolveStage1(m, Shape(0), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Token assignment on a layer whose weights are all CC (gg = cg = 0), with
// every α and launch 0, n_l = 3, E = 1e6 elements, n_W = 1e6 B:
//   copy c = 1e6 · 1e-10 = 1e-4 s (CG′, only when n_g > 0)
//   GPU  g = n_g · 1e6 · 1e-13 = 1e-7 · n_g
//   CPU  p = (T − n_g) · 1e6 · 1e-11 = 1e-5 · (T − n_g)
// Copy-bound (c > g, n_g < 1000): τ_G = 3c + g, τ_C = 3p; they balance at
//   n_g = (3e-5·T − 3e-4) / (3e-5 + 1e-7) = (3T − 30) / 3.01,
// zero up to T = K = c / (per-token CPU time) = 10 tokens: a prompt the CPU
// finishes within one weight copy gains nothing from the GPU. Above it n_g
// grows with T (slope 3 / 3.01), and so does n_g / T (the fixed copy is
// amortised over more tokens).
// GPU-bound (g > c, n_g > 1000): τ_G = c + 3g; balance at
//   n_g = (3e-5·T − 1e-4) / (3e-7 + 3e-5).
// Rounded to the better neighbour (times in the comments):
//   T = 5:     0   (CPU only, 1.5e-4 s; any CG′ costs a 3e-4 s copy)
//   T = 100:   89.70 → 90 (89: max(3.089e-4, 3.3e-4); 90: max(3.09e-4, 3e-4))
//   T = 1000:  986.71 → 987 (986: 4.2e-4; 987: max(3.987e-4, 3.9e-4))
//   T = 10000: 9897.03 → 9898 (9897: 3.09e-3; 9898: max(3.0694e-3, 3.06e-3))
TEST(PrefillTokensTest, LongerPromptsPutMoreTokensOnTheGpu) {
  PrefillGroup g;
  g.model.h2d = {0, 1e-10};
  g.model.gpu = {0, 1e-13};
  g.model.cpu = {0, 1e-11};
  g.split = {0, 0, 1};
  g.count = 1;
  struct Expect {
    int64_t prompt, n_g;
  };
  int64_t prev = -1;
  double prev_fraction = -1;
  for (const Expect& e : {Expect{5, 0}, Expect{10, 0}, Expect{100, 90},
                          Expect{1000, 987}, Expect{10000, 9898}}) {
    g.shape = Shape(3, static_cast<double>(e.prompt));
    absl::StatusOr<TokenAssignment> a = SolvePrefillTokens({g}, e.prompt);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->gpu_tokens, e.n_g) << "T = " << e.prompt;
    EXPECT_LE(a->mlp_seconds, a->cpu_only_seconds);
    EXPECT_NEAR(a->cpu_only_seconds, 3e-5 * e.prompt, 1e-15);
    EXPECT_GE(a->gpu_tokens, prev);
    const double fraction = static_cast<double>(a->gpu_tokens) / e.prompt;
    EXPECT_GE(fraction, prev_fraction);
    prev = a->gpu_tokens;
    prev_fraction = fraction;
  }
}

// Several groups share one n_g: a fully GG group does not depend on it, and
// the answer is the one that minimises the sum (checked against every n_g).
TEST(PrefillTokensTest, SharedNgMinimisesTheSum) {
  PrefillGroup a;
  a.model.launch_s = 2e-5;
  a.model.h2d = {3e-6, 1e-10};
  a.model.gpu = {1e-7, 1e-13};
  a.model.cpu = {5e-6, 1e-11};
  a.shape = Shape(3, 300);
  a.split = {0.2, 0.3, 0.5};
  a.count = 30;
  PrefillGroup b = a;
  b.split = {0.6, 0.1, 0.3};
  b.count = 10;
  PrefillGroup c = a;
  c.split = {1, 0, 0};
  c.count = 5;
  absl::StatusOr<TokenAssignment> r = SolvePrefillTokens({a, b, c}, 300);
  ASSERT_TRUE(r.ok()) << r.status();
  double best = std::numeric_limits<double>::infinity();
  for (int n = 0; n <= 300; ++n) {
    double sum = 0;
    for (const PrefillGroup& g : {a, b, c}) {
      sum += g.count * *SimulateMlpLayer(PrefillStreamTimes(g.model, g.shape,
                                                            g.split, n / 300.0),
                                         g.shape.num_gemms);
    }
    best = std::min(best, sum);
  }
  EXPECT_NEAR(r->mlp_seconds, best, 1e-15);
  EXPECT_GT(r->gpu_tokens, 0);
}

TEST(PrefillTokensTest, Errors) {
  EXPECT_EQ(SolvePrefillTokens({}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ----- Screening: simulate only the candidates that can win -----

// A random model with every α, β and the launch cost spread over three
// decades, so that every regime and every kind of crossing shows up.
CostModel RandomModel(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  auto spread = [&](double mid) {
    return mid * std::pow(10.0, 3 * u(rng) - 1.5);
  };
  CostModel m;
  m.launch_s = u(rng) < 0.2 ? 0 : spread(2e-5);
  m.h2d = {u(rng) < 0.2 ? 0 : spread(3e-6), spread(1e-10)};
  m.gpu = {u(rng) < 0.5 ? 0 : spread(1e-7), spread(1e-12)};
  m.cpu = {u(rng) < 0.2 ? 0 : spread(5e-6), spread(1e-11)};
  return m;
}

// SolveStage1 before screening: every candidate simulated, the first
// strictly best kept.
Stage1Result Stage1SimulatingEveryCandidate(const CostModel& m,
                                            const GemmShape& s, double r_gg) {
  const double hi = std::max(0.0, 1.0 - r_gg);
  const std::vector<double> xs =
      hi > kShareEpsilon
          ? BreakpointCandidates(Stage1Lines(m, s, r_gg), s.num_gemms, 0, hi)
          : std::vector<double>{0.0};
  Stage1Result best;
  best.t_fin = std::numeric_limits<double>::infinity();
  best.candidates = static_cast<int>(xs.size());
  for (double x : xs) {
    const StreamTimes t =
        DecodeStreamTimes(m, s, {r_gg, x, std::max(0.0, 1.0 - r_gg - x)});
    const double t_fin = *SimulateMlpLayer(t, s.num_gemms);
    if (t_fin < best.t_fin) {
      best.r_cg = x;
      best.t_fin = t_fin;
      best.regime = ClassifyRegime(t);
    }
  }
  return best;
}

TEST(Stage1Test, ScreeningPicksWhatSimulatingEveryCandidatePicks) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> gemms(1, 200);
  for (int trial = 0; trial < 3000; ++trial) {
    // Every 100th model costs nothing at all: every candidate ties.
    const CostModel m = trial % 100 == 0 ? CostModel{} : RandomModel(rng);
    GemmShape s = Shape(gemms(rng), 1 + trial % 64);
    const double r_gg = (trial % 33) / 32.0;
    absl::StatusOr<Stage1Result> r = SolveStage1(m, s, r_gg);
    ASSERT_TRUE(r.ok()) << r.status();
    const Stage1Result want = Stage1SimulatingEveryCandidate(m, s, r_gg);
    ASSERT_EQ(r->r_cg, want.r_cg) << trial;
    ASSERT_EQ(r->t_fin, want.t_fin) << trial;
    ASSERT_EQ(r->regime, want.regime) << trial;
    ASSERT_EQ(r->candidates, want.candidates) << trial;
  }
}

// SolvePrefillTokens before screening.
TokenAssignment PrefillSimulatingEveryCandidate(
    const std::vector<PrefillGroup>& groups, int64_t prompt_tokens) {
  const double t_tokens = static_cast<double>(prompt_tokens);
  std::vector<int64_t> cands = {0, prompt_tokens};
  for (const PrefillGroup& g : groups) {
    if (Sgn(g.split.cc) == 0 || g.count <= 0) continue;
    for (double phi :
         BreakpointCandidates(PrefillLines(g.model, g.shape, g.split),
                              g.shape.num_gemms, 0, 1)) {
      cands.push_back(static_cast<int64_t>(std::floor(phi * t_tokens)));
      cands.push_back(static_cast<int64_t>(std::ceil(phi * t_tokens)));
    }
  }
  for (int64_t& c : cands) c = std::clamp<int64_t>(c, 0, prompt_tokens);
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  TokenAssignment best;
  best.mlp_seconds = std::numeric_limits<double>::infinity();
  for (int64_t n_g : cands) {
    double sum = 0;
    for (const PrefillGroup& g : groups) {
      if (g.count <= 0) continue;
      sum +=
          g.count * *SimulateMlpLayer(
                        PrefillStreamTimes(g.model, g.shape, g.split,
                                           static_cast<double>(n_g) / t_tokens),
                        g.shape.num_gemms);
    }
    if (n_g == 0) best.cpu_only_seconds = sum;
    if (sum < best.mlp_seconds) {
      best.mlp_seconds = sum;
      best.gpu_tokens = n_g;
    }
  }
  return best;
}

TEST(PrefillTokensTest, ScreeningPicksWhatSimulatingEveryCandidatePicks) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> gemms(1, 200), groups(1, 5);
  for (int trial = 0; trial < 1500; ++trial) {
    const int64_t prompt = 1 + static_cast<int64_t>(u(rng) * 4096);
    const CostModel m = trial % 100 == 0 ? CostModel{} : RandomModel(rng);
    const GemmShape shape = Shape(gemms(rng), static_cast<double>(prompt));
    std::vector<PrefillGroup> gs;
    for (int g = groups(rng); g > 0; --g) {
      // Splits on the n_G = 32 grid, as the planner makes them; some fully
      // GG, some all CC.
      Split split;
      split.gg = std::floor(u(rng) * 33) / 32;
      split.cg = u(rng) < 0.3 ? 0 : (1 - split.gg) * u(rng);
      split.cc = std::max(0.0, 1 - split.gg - split.cg);
      gs.push_back({m, shape, split, std::floor(u(rng) * 40)});
    }
    absl::StatusOr<TokenAssignment> r = SolvePrefillTokens(gs, prompt);
    ASSERT_TRUE(r.ok()) << r.status();
    const TokenAssignment want = PrefillSimulatingEveryCandidate(gs, prompt);
    ASSERT_EQ(r->gpu_tokens, want.gpu_tokens) << trial;
    ASSERT_EQ(r->mlp_seconds, want.mlp_seconds) << trial;
    ASSERT_EQ(r->cpu_only_seconds, want.cpu_only_seconds) << trial;
  }
}

// ----- Stage 2 -----

// Two layers of 100 sliceable bytes, n_G = 4 (25 bytes a step):
//   f0 = [10, 8, 6.5, 5.5, 1]  (a big drop at r_GG = 1: no CPU or PCIe left)
//   f1 = [10, 9, 8, 7, 6]
std::vector<Stage2Layer> TwoLayers() {
  return {{100, {10, 8, 6.5, 5.5, 1}}, {100, {10, 9, 8, 7, 6}}};
}

// Budget 50, by hand (score = saved / extra bytes):
//   it 1: L0 →1: 2/25 = .08, →2: 3.5/50 = .07 (→3 needs 75: no); L1 →1: .04,
//         →2: .04. Best L0 →1 (25 used).
//   it 2: L0 →2: 1.5/25 = .06 (→3 needs 75: no); L1 →1: .04. L0 →2 (50 used).
//   it 3: nothing fits. Levels [2, 0], time 6.5 + 10 = 16.5.
TEST(AssignGpuMemoryTest, GreedyByHand) {
  absl::StatusOr<Stage2Result> r = AssignGpuMemory(TwoLayers(), 50);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->level, (std::vector<int>{2, 0}));
  EXPECT_DOUBLE_EQ(r->gg_bytes, 50);
  EXPECT_DOUBLE_EQ(r->total_time, 16.5);
  EXPECT_EQ(r->moves, 2);
}

// Budget 100: L0 →4 scores 9/100 = .09 > .08, a jump over the non-convex
// drop (scoring every v_i > v_pre, not only the next step): [4, 0], 11.
TEST(AssignGpuMemoryTest, JumpsOverANonConvexDrop) {
  absl::StatusOr<Stage2Result> r = AssignGpuMemory(TwoLayers(), 100);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->level, (std::vector<int>{4, 0}));
  EXPECT_DOUBLE_EQ(r->total_time, 11);
}

// Budget 75: the jump to 4 does not fit and is skipped for the best move that
// does: it 1 L0 →1 (.08); it 2 L0 →2 (.06); it 3 L0 →3 (1/25 = .04) ties
// L1 →1 (.04): the first found (L0) wins. [3, 0], 5.5 + 10 = 15.5.
TEST(AssignGpuMemoryTest, SkipsMovesThatDoNotFit) {
  absl::StatusOr<Stage2Result> r = AssignGpuMemory(TwoLayers(), 75);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->level, (std::vector<int>{3, 0}));
  EXPECT_DOUBLE_EQ(r->total_time, 15.5);
}

// Over a sweep of budgets: never above the budget, never slower with more.
TEST(AssignGpuMemoryTest, BudgetSweep) {
  double prev = std::numeric_limits<double>::infinity();
  for (int budget = 0; budget <= 220; ++budget) {
    absl::StatusOr<Stage2Result> r = AssignGpuMemory(TwoLayers(), budget);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->gg_bytes, budget);
    EXPECT_LE(r->total_time, prev) << "budget " << budget;
    prev = r->total_time;
  }
  EXPECT_DOUBLE_EQ(prev, 1 + 6);  // everything on the GPU
}

TEST(AssignGpuMemoryTest, ZeroBudgetAndUselessMemory) {
  absl::StatusOr<Stage2Result> r = AssignGpuMemory(TwoLayers(), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->level, (std::vector<int>{0, 0}));
  EXPECT_DOUBLE_EQ(r->total_time, 20);
  // Higher r_GG that is never faster is not taken (score <= 0).
  r = AssignGpuMemory({{100, {5, 5, 6, 7}}}, 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->level, (std::vector<int>{0}));
  EXPECT_EQ(r->gg_bytes, 0);
}

// AssignGpuMemory before twins were skipped: every layer scored every
// iteration.
Stage2Result AssignScoringEveryLayer(const std::vector<Stage2Layer>& layers,
                                     double budget) {
  const int steps = static_cast<int>(layers[0].f.size()) - 1;
  Stage2Result r;
  r.level.assign(layers.size(), 0);
  auto used_with = [&](size_t j, int level) {
    double used = 0;
    for (size_t k = 0; k < layers.size(); ++k) {
      used += LevelBytes(layers[k], k == j ? level : r.level[k]);
    }
    return used;
  };
  for (;;) {
    double best_score = 0;
    size_t best_layer = 0;
    int best_level = -1;
    const double used = used_with(layers.size(), 0);
    for (size_t j = 0; j < layers.size(); ++j) {
      const Stage2Layer& l = layers[j];
      const int pre = r.level[j];
      const double pre_bytes = LevelBytes(l, pre);
      for (int i = pre + 1; i <= steps; ++i) {
        const double extra = LevelBytes(l, i) - pre_bytes;
        if (used + extra > budget) break;
        const double saved = l.f[pre] - l.f[i];
        const double score =
            extra > 0
                ? saved / extra
                : (saved > 0 ? std::numeric_limits<double>::infinity() : 0);
        if (score > best_score) {
          best_score = score;
          best_layer = j;
          best_level = i;
        }
      }
    }
    if (best_level < 0) break;
    if (used_with(best_layer, best_level) > budget) break;
    r.level[best_layer] = best_level;
    ++r.moves;
  }
  r.gg_bytes = used_with(layers.size(), 0);
  for (size_t j = 0; j < layers.size(); ++j)
    r.total_time += layers[j].f[r.level[j]];
  return r;
}

// Layers of a few kinds interleaved, tables on a coarse grid so that scores
// tie often (between twins, between kinds and between levels), non-convex
// tables, zero-byte layers, budgets from none to everything: skipping twins
// gives exactly the moves of scoring every layer.
TEST(AssignGpuMemoryTest, TwinLayersGiveTheSameMovesAsScoringEveryLayer) {
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int> coarse(0, 6), kinds(1, 4), count(1, 60);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 400; ++trial) {
    const int steps = 1 + trial % 8;
    std::vector<Stage2Layer> kind_list;
    for (int k = kinds(rng); k > 0; --k) {
      Stage2Layer l;
      l.sliceable_bytes = u(rng) < 0.1 ? 0 : 25.0 * (1 + coarse(rng));
      double t = 100;
      l.f.push_back(t);
      for (int i = 1; i <= steps; ++i) {
        t += coarse(rng) - 4;  // mostly falling, sometimes rising
        l.f.push_back(t);
      }
      kind_list.push_back(l);
    }
    std::vector<Stage2Layer> layers;
    std::uniform_int_distribution<size_t> pick(0, kind_list.size() - 1);
    for (int j = count(rng); j > 0; --j) layers.push_back(kind_list[pick(rng)]);
    double total = 0;
    for (const Stage2Layer& l : layers) total += l.sliceable_bytes;
    for (double budget : {0.0, 25.0, total * u(rng), total * u(rng), total}) {
      absl::StatusOr<Stage2Result> r = AssignGpuMemory(layers, budget);
      ASSERT_TRUE(r.ok()) << r.status();
      const Stage2Result want = AssignScoringEveryLayer(layers, budget);
      ASSERT_EQ(r->level, want.level) << trial << " budget " << budget;
      ASSERT_EQ(r->moves, want.moves);
      ASSERT_EQ(r->gg_bytes, want.gg_bytes);
      ASSERT_EQ(r->total_time, want.total_time);
    }
  }
}

TEST(AssignGpuMemoryTest, Errors) {
  EXPECT_EQ(AssignGpuMemory(TwoLayers(), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignGpuMemory(TwoLayers(), std::nan("")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      AssignGpuMemory({{100, {1, 2}}, {100, {1, 2, 3}}}, 10).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignGpuMemory({{100, {1}}}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignGpuMemory({{-5, {1, 2}}}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignGpuMemory({{5, {1, std::nan("")}}}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::planner::scheinfer
