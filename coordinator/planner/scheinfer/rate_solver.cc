#include "coordinator/planner/scheinfer/rate_solver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::planner::scheinfer {
namespace {

// The x where two lines cross, if they do at a single point.
bool Crossing(const Line& p, const Line& q, double* x) {
  const double db = p.b - q.b;
  if (std::abs(db) < 1e-300) return false;  // parallel (or the same line)
  *x = (q.a - p.a) / db;
  return std::isfinite(*x);
}

// The simulated t_fin in closed form, for screening candidates before
// simulating them: a flow shop of identical jobs (launch → copy → GPU GEMM,
// and the CPU GEMMs alone) ends at the sum of the stages plus (n − 1) times
// the slowest, which is exactly what the simulator computes up to rounding
// (about n ulps). Unlike ClosedFormLayerTime it follows the simulator where
// it has no tasks (a stream time <= 0 adds none) and counts the launches'
// own end.
double ScreenLayerTime(const StreamTimes& t, int num_gemms) {
  if (num_gemms <= 0) return 0;
  const double launch = std::max(t.launch, 0.0), copy = std::max(t.copy, 0.0),
               gpu = std::max(t.gpu, 0.0), cpu = std::max(t.cpu, 0.0);
  const double n = num_gemms;
  const double gpu_side =
      copy > 0 || gpu > 0
          ? launch + copy + gpu + (n - 1) * std::max({launch, copy, gpu})
          : n * launch;
  return std::max(gpu_side, n * cpu);
}

// Screening keeps every candidate whose closed-form time is within this
// relative margin of the best closed-form time, and simulates only those.
// Closed form and simulation differ by rounding alone (~1e-16 per GEMM of
// the layer), so a candidate outside the margin can neither be the simulated
// optimum nor tie it: the pick is exactly the one simulating every
// candidate would make.
constexpr double kScreenMargin = 1e-9;

// The indices of `times` (closed-form times of candidates) that may hold the
// simulated minimum; all of them when some time is not finite (then the
// simulation reports the bad stream time, as it did before screening).
std::vector<size_t> Screen(const std::vector<double>& times) {
  std::vector<size_t> keep;
  double best = std::numeric_limits<double>::infinity();
  bool finite = true;
  for (double t : times) {
    finite &= std::isfinite(t);
    best = std::min(best, t);
  }
  for (size_t i = 0; i < times.size(); ++i) {
    if (!finite || times[i] <= best + kScreenMargin * std::abs(best)) {
      keep.push_back(i);
    }
  }
  return keep;
}

}  // namespace

std::vector<double> BreakpointCandidates(const StreamLines& l, int num_gemms,
                                         double lo, double hi) {
  const double k = std::max(num_gemms - 1, 0);
  const double n = std::max(num_gemms, 0);
  // S = t_L + t_C2G + t_G; the GPU side is S + k·max(t_L, t_C2G, t_G), i.e.
  // the upper envelope of the three case lines below (Case 3, 1, 2).
  const Line s{l.launch.a + l.copy.a + l.gpu.a,
               l.launch.b + l.copy.b + l.gpu.b};
  const std::vector<Line> lines = {
      {s.a + k * l.launch.a, s.b + k * l.launch.b},  // launch-bound (Eq. 12)
      {s.a + k * l.copy.a, s.b + k * l.copy.b},      // copy-bound (Eq. 10)
      {s.a + k * l.gpu.a, s.b + k * l.gpu.b},        // GPU-bound (Eq. 11)
      {n * l.cpu.a, n * l.cpu.b},                    // τ_C = n_l·t_C
  };
  std::vector<double> xs = {lo, hi};
  for (size_t i = 0; i < lines.size(); ++i) {
    for (size_t j = i + 1; j < lines.size(); ++j) {
      double x;
      if (Crossing(lines[i], lines[j], &x) && x > lo && x < hi) xs.push_back(x);
    }
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  return xs;
}

StreamLines Stage1Lines(const CostModel& m, const GemmShape& s, double r_gg) {
  const double n = s.n_gemm();
  const double s_gg = Sgn(r_gg);
  StreamLines l;
  l.launch = {(2 + s_gg) * m.launch_s, 0};
  l.copy = {m.h2d.alpha, s.weight_bytes * m.h2d.beta};
  l.gpu = {(1 + s_gg) * m.gpu.alpha + s_gg * r_gg * n * m.gpu.beta,
           n * m.gpu.beta};
  l.cpu = {m.cpu.alpha + (1 - r_gg) * n * m.cpu.beta, -n * m.cpu.beta};
  return l;
}

absl::StatusOr<Stage1Result> SolveStage1(const CostModel& m, const GemmShape& s,
                                         double r_gg) {
  if (!(r_gg >= 0 && r_gg <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("r_GG must be in [0, 1], got ", r_gg));
  }
  if (s.num_gemms <= 0)
    return absl::InvalidArgumentError("a layer needs at least one GEMM");
  const double hi = std::max(0.0, 1.0 - r_gg);
  std::vector<double> xs =
      hi > kShareEpsilon
          ? BreakpointCandidates(Stage1Lines(m, s, r_gg), s.num_gemms, 0, hi)
          : std::vector<double>{0.0};
  Stage1Result best;
  best.t_fin = std::numeric_limits<double>::infinity();
  best.candidates = static_cast<int>(xs.size());
  std::vector<StreamTimes> times;
  std::vector<double> screen;
  for (double x : xs) {
    const Split split{r_gg, x, std::max(0.0, 1.0 - r_gg - x)};
    times.push_back(DecodeStreamTimes(m, s, split));
    screen.push_back(ScreenLayerTime(times.back(), s.num_gemms));
  }
  for (size_t i : Screen(screen)) {  // ascending x
    const double x = xs[i];
    const StreamTimes& t = times[i];
    TANDEM_ASSIGN_OR_RETURN(double t_fin, SimulateMlpLayer(t, s.num_gemms));
    // Strictly better only: among equal times the first (smallest r_CG,
    // least PCIe traffic and staging memory) wins.
    if (t_fin < best.t_fin) {
      best.r_cg = x;
      best.t_fin = t_fin;
      best.regime = ClassifyRegime(t);
    }
  }
  return best;
}

StreamLines PrefillLines(const CostModel& m, const GemmShape& s,
                         const Split& split) {
  // Strictly inside (0, 1): CG′ exists (sgn(cc·n_g) = 1) and the CPU keeps
  // tokens (sgn(cc·(T − n_g)) = 1), so only the token terms move with φ.
  const double e = s.elements, tokens = s.tokens;
  const double s_cg = Sgn(split.cg), s_gg = Sgn(split.gg);
  const double cg = s_cg * split.cg, gg = s_gg * split.gg;
  StreamLines l;
  l.launch = {(2 * s_cg + 2 + s_gg) * m.launch_s, 0};
  l.copy = {
      (s_cg + 1) * m.h2d.alpha + (cg + split.cc) * s.weight_bytes * m.h2d.beta,
      0};
  l.gpu = {
      (s_cg + s_gg + 1) * m.gpu.alpha + tokens * (cg + gg) * e * m.gpu.beta,
      tokens * split.cc * e * m.gpu.beta};
  l.cpu = {m.cpu.alpha + tokens * split.cc * e * m.cpu.beta,
           -tokens * split.cc * e * m.cpu.beta};
  return l;
}

absl::StatusOr<TokenAssignment> SolvePrefillTokens(
    const std::vector<PrefillGroup>& groups, int64_t prompt_tokens) {
  if (prompt_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a prefill needs at least one token, got ", prompt_tokens));
  }
  const double t_tokens = static_cast<double>(prompt_tokens);
  // Candidate n_g: 0, T and the rounded crossings of every group that has a
  // CC share (the others do not depend on n_g).
  std::vector<int64_t> cands = {0, prompt_tokens};
  for (const PrefillGroup& g : groups) {
    if (Sgn(g.split.cc) == 0 || g.count <= 0) continue;
    for (double phi :
         BreakpointCandidates(PrefillLines(g.model, g.shape, g.split),
                              g.shape.num_gemms, 0, 1)) {
      const double x = phi * t_tokens;
      cands.push_back(static_cast<int64_t>(std::floor(x)));
      cands.push_back(static_cast<int64_t>(std::ceil(x)));
    }
  }
  for (int64_t& c : cands) c = std::clamp<int64_t>(c, 0, prompt_tokens);
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());

  // Σ count·t_fin over the groups, simulated or (to screen) in closed form.
  auto total = [&](int64_t n_g, bool simulate) -> absl::StatusOr<double> {
    double sum = 0;
    for (const PrefillGroup& g : groups) {
      if (g.count <= 0) continue;
      const StreamTimes t = PrefillStreamTimes(
          g.model, g.shape, g.split, static_cast<double>(n_g) / t_tokens);
      double t_fin;
      if (simulate) {
        TANDEM_ASSIGN_OR_RETURN(t_fin, SimulateMlpLayer(t, g.shape.num_gemms));
      } else {
        t_fin = ScreenLayerTime(t, g.shape.num_gemms);
      }
      sum += g.count * t_fin;
    }
    return sum;
  };
  std::vector<double> screen;
  for (int64_t n_g : cands) {
    TANDEM_ASSIGN_OR_RETURN(double t, total(n_g, /*simulate=*/false));
    screen.push_back(t);
  }
  TokenAssignment best;
  best.mlp_seconds = std::numeric_limits<double>::infinity();
  // n_g = 0 (cands[0]) is simulated whatever the screen says: it is the
  // token-assignment-off figure.
  TANDEM_ASSIGN_OR_RETURN(best.cpu_only_seconds, total(0, /*simulate=*/true));
  for (size_t i : Screen(screen)) {  // ascending: ties keep the smaller n_g
    const int64_t n_g = cands[i];
    double t = best.cpu_only_seconds;
    if (n_g != 0) {
      TANDEM_ASSIGN_OR_RETURN(t, total(n_g, /*simulate=*/true));
    }
    if (t < best.mlp_seconds) {
      best.mlp_seconds = t;
      best.gpu_tokens = n_g;
    }
  }
  return best;
}

// ----- Stage 2 -----

double LevelBytes(const Stage2Layer& layer, int level) {
  const int steps = static_cast<int>(layer.f.size()) - 1;
  if (steps <= 0 || level <= 0) return 0;
  return layer.sliceable_bytes * static_cast<double>(level) /
         static_cast<double>(steps);
}

absl::StatusOr<Stage2Result> AssignGpuMemory(
    const std::vector<Stage2Layer>& layers, double budget_bytes) {
  if (!(budget_bytes >= 0) || !std::isfinite(budget_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Stage 2: the GPU budget must be finite and >= 0, got ", budget_bytes));
  }
  size_t steps = 0;
  for (size_t j = 0; j < layers.size(); ++j) {
    const Stage2Layer& l = layers[j];
    if (l.f.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Stage 2: layer ", j,
                       " needs f at r_GG = 0 and at least one more level"));
    }
    if (j == 0) steps = l.f.size() - 1;
    if (l.f.size() - 1 != steps) {
      return absl::InvalidArgumentError(
          "Stage 2: every layer must use the same grid");
    }
    if (!(l.sliceable_bytes >= 0) || !std::isfinite(l.sliceable_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Stage 2: layer ", j, " has bad sliceable bytes ",
                       l.sliceable_bytes));
    }
    for (double v : l.f) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Stage 2: layer ", j, " has a bad time"));
      }
    }
  }

  // Layers with the same table and bytes (every layer of one kind, in a
  // model) score the same moves when they stand at the same level. The scan
  // below visits layers in order and keeps the first strictly best score, so
  // of such twins only the first can ever be picked: the later ones are
  // skipped, which makes an iteration cost O(layers + distinct (kind, level)
  // pairs · n_G) instead of O(layers · n_G), with exactly the same moves.
  // Twins are found by bitwise equality, so any difference at all keeps two
  // layers apart.
  std::vector<int> kind(layers.size());
  std::vector<size_t> kind_first;  // a layer of each kind
  for (size_t j = 0; j < layers.size(); ++j) {
    const Stage2Layer& l = layers[j];
    size_t k = 0;
    for (; k < kind_first.size(); ++k) {
      const Stage2Layer& o = layers[kind_first[k]];
      if (std::memcmp(&o.sliceable_bytes, &l.sliceable_bytes, sizeof(double)) ==
              0 &&
          std::memcmp(o.f.data(), l.f.data(), l.f.size() * sizeof(double)) ==
              0) {
        break;
      }
    }
    if (k == kind_first.size()) kind_first.push_back(j);
    kind[j] = static_cast<int>(k);
  }
  // seen[kind · (n_G + 1) + level] == iteration: a twin was scored already.
  std::vector<int> seen(kind_first.size() * (steps + 1), -1);
  // bytes[kind · (n_G + 1) + level] = LevelBytes of that kind's layers.
  std::vector<double> bytes(kind_first.size() * (steps + 1));
  for (size_t k = 0; k < kind_first.size(); ++k) {
    for (size_t i = 0; i <= steps; ++i) {
      bytes[k * (steps + 1) + i] =
          LevelBytes(layers[kind_first[k]], static_cast<int>(i));
    }
  }
  auto level_bytes = [&](size_t j, int level) {
    return bytes[kind[j] * (steps + 1) + level];
  };

  Stage2Result r;
  // Every layer starts at r_GG = 0 (digest: assumed).
  r.level.assign(layers.size(), 0);
  // The used bytes are re-summed from the levels after each move rather than
  // accumulated, so that the check below and the reported gg_bytes are the
  // same sum and rounding cannot let the total creep past the budget.
  auto used_with = [&](size_t j, int level) {
    double used = 0;
    for (size_t k = 0; k < layers.size(); ++k) {
      used += level_bytes(k, k == j ? level : r.level[k]);
    }
    return used;
  };
  for (;;) {
    double best_score = 0;  // only moves that save time
    size_t best_layer = 0;
    int best_level = -1;
    const double used = used_with(layers.size(), 0);
    for (size_t j = 0; j < layers.size(); ++j) {
      const Stage2Layer& l = layers[j];
      const int pre = r.level[j];
      int& twin = seen[kind[j] * (steps + 1) + pre];
      if (twin == r.moves) continue;  // an earlier twin scored these moves
      twin = r.moves;
      const double pre_bytes = level_bytes(j, pre);
      for (int i = pre + 1; i <= static_cast<int>(steps); ++i) {
        const double extra = level_bytes(j, i) - pre_bytes;
        if (used + extra > budget_bytes)
          break;  // larger levels cost more still
        const double saved = l.f[pre] - l.f[i];
        // A layer with no sliceable bytes gains for free: take any saving.
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
    // Exact re-check with the re-summed total (see used_with).
    if (used_with(best_layer, best_level) > budget_bytes) break;
    r.level[best_layer] = best_level;
    ++r.moves;
  }
  r.gg_bytes = used_with(layers.size(), 0);
  for (size_t j = 0; j < layers.size(); ++j)
    r.total_time += layers[j].f[r.level[j]];
  return r;
}

}  // namespace tandem::planner::scheinfer
