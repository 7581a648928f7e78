#include "coordinator/planner/moe_lightning/ml_policy_search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace tandem::planner::ml {
namespace {

// Beyond these the memory of any machine we plan for runs out long before;
// they only bound the loops.
constexpr int64_t kMaxMicroBatch = 4096;
constexpr int64_t kMaxMicroBatches = 2048;

std::array<double, 6> Resources(const LayerTimes& t) {
  return {t.h2d, t.d2h, t.cpu, t.gpu, t.launch, t.chain};
}

// The r_w values where the best point of [lo, hi] can lie. With F_g = 1
// every time term is non-increasing in r_w (the GPU reads the whole layer
// from HBM whether it is resident or streamed; only the PCIe and staging
// terms shrink) and so is prefill, so hi is optimal. With F_g = 0 a larger
// r_w moves FFN work from the CPU to the GPU: the per-layer time is the
// max of lines in r_w (convex, piecewise-linear) and prefill is linear, so
// the optimum lies at an end, at a kink (where the resident share passes
// the attention weights) or where two resources' lines cross. The crossing
// is found on the costliest layer kind; models that mix dense and MoE
// layers get an approximation there.
std::vector<double> WeightsCandidates(const PerformanceModel& m,
                                      const PolicyPoint& base, double lo,
                                      double hi) {
  std::vector<double> out = {hi};
  if (base.ffn_on_gpu || hi - lo < 1e-12) return out;
  out.push_back(lo);
  std::vector<double> knots = {lo, hi};
  const ModelConfig& c = m.model().config();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    // One knot per distinct layer size (dense and MoE layers differ).
    const double k = m.attention_part_bytes() / m.model().layer_weight_bytes(l);
    if (k > lo && k < hi &&
        std::find(knots.begin(), knots.end(), k) == knots.end()) {
      knots.push_back(k);
    }
  }
  std::sort(knots.begin(), knots.end());
  for (size_t s = 0; s + 1 < knots.size(); ++s) {
    const double a = knots[s], b = knots[s + 1];
    if (s > 0) out.push_back(a);
    PolicyPoint pa = base, pb = base;
    pa.weights_gpu_fraction = a;
    pb.weights_gpu_fraction = b;
    const auto ra = Resources(m.Evaluate(pa).layer),
               rb = Resources(m.Evaluate(pb).layer);
    for (size_t x = 0; x < ra.size(); ++x) {
      for (size_t y = x + 1; y < ra.size(); ++y) {
        const double d0 = ra[x] - ra[y], d1 = rb[x] - rb[y];
        if (d0 * d1 < 0) out.push_back(a + (b - a) * d0 / (d0 - d1));
      }
    }
  }
  return out;
}

}  // namespace

std::vector<int64_t> SearchGrid(int64_t max) {
  std::vector<int64_t> grid;
  for (int64_t v = 1; v <= max;) {
    grid.push_back(v);
    v = v < 8 ? v + 1
              : std::max(v + 1, static_cast<int64_t>(std::llround(v * 1.15)));
  }
  return grid;
}

absl::StatusOr<SearchOutcome> SearchMoeLightningPolicy(
    const PerformanceModel& m) {
  const Workload& w = m.workload();
  const bool slo = w.objective == Objective::kThroughputUnderItlSlo;
  const int64_t max_batch =
      w.max_batch > 0 ? w.max_batch : kMaxMicroBatch * kMaxMicroBatches;
  const std::vector<int64_t> mus =
      SearchGrid(std::min(max_batch, kMaxMicroBatch));
  const std::vector<int64_t> ubs = SearchGrid(kMaxMicroBatches);

  SearchOutcome best;
  bool found = false, any_fit = false;
  double fastest = std::numeric_limits<double>::infinity();
  for (bool attention_on_gpu : {false, true}) {
    for (bool ffn_on_gpu : {true, false}) {
      for (int64_t mu : mus) {
        for (int64_t n_ub : ubs) {
          const int64_t n = mu * n_ub;
          if (n > max_batch) break;
          PolicyPoint p;
          p.batch_size = n;
          p.micro_batch_size = mu;
          p.attention_on_gpu = attention_on_gpu;
          p.ffn_on_gpu = ffn_on_gpu;
          double lo = 0, hi = 0;
          // No break on a misfit: with two-hop staging a larger N/μ shrinks
          // the pages, so fitting is not monotone in N in every mode.
          if (!m.WeightsFractionRange(p, &lo, &hi)) continue;
          for (double r_w : WeightsCandidates(m, p, lo, hi)) {
            PolicyPoint q = p;
            q.weights_gpu_fraction = r_w;
            if (!m.FillKvFraction(&q)) continue;
            const Estimate e = m.Evaluate(q);
            ++best.points_evaluated;
            any_fit = true;
            fastest = std::min(fastest, e.decode_step_s);
            if (slo && e.decode_step_s > w.slo_itl_s) continue;
            if (!found ||
                e.throughput > best.estimate.throughput * (1 + 1e-9)) {
              found = true;
              best.point = q;
              best.estimate = e;
            }
          }
        }
      }
    }
  }
  if (found) return best;
  if (any_fit) {
    return absl::FailedPreconditionError(
        absl::StrFormat("MoE-Lightning: no policy meets the ITL SLO of %.4g s; "
                        "its fastest decode step is %.4g s",
                        w.slo_itl_s, fastest));
  }
  // Report the smallest need of each memory: one sequence (N = μ = 1), the
  // GPU at r_w = 0 and the host at r_w = 1 (each memory's cheapest end).
  PolicyPoint p;
  const MemoryUse gpu_min = m.Memory(p);
  p.weights_gpu_fraction = 1;
  const MemoryUse cpu_min = m.Memory(p);
  return absl::FailedPreconditionError(absl::StrFormat(
      "MoE-Lightning: the model does not fit: even one sequence needs %.2f GB "
      "of GPU memory "
      "with every weight streamed (budget %.2f GB) and %.2f GB of host memory "
      "with every "
      "weight on the GPU (budget %.2f GB), and no r_w between meets both",
      gpu_min.gpu() / 1e9, m.gpu_budget() / 1e9, cpu_min.cpu() / 1e9,
      m.cpu_budget() / 1e9));
}

}  // namespace tandem::planner::ml
