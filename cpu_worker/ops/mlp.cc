#include "cpu_worker/ops/mlp.h"

#include <omp.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/elementwise.h"

namespace tandem::ops {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

absl::StatusOr<LinearWeight> Load(const Checkpoint& ckpt, const std::string& name,
                                  ComputeType prefer) {
  TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt.Tensor(name));
  return LinearWeight::Create(t, prefer);
}

absl::StatusOr<LinearWeight> LoadExpert(const Checkpoint& ckpt, const std::string& base,
                                        int64_t expert, ComputeType prefer) {
  TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt.ExpertTensor(base, expert));
  return LinearWeight::Create(t, prefer);
}

}  // namespace

void RunMlp(const MlpWeights& m, const float* x, int64_t rows, float* out, MlpScratch& s) {
  const MlpCall call{&m, x, rows, out};
  RunMlps(&call, 1, s);
}

namespace internal {

bool ShareMlpsOut(const std::vector<double>& costs, int threads) {
  if (threads < 2 || static_cast<int64_t>(costs.size()) < threads) return false;
  std::vector<double> sorted = costs;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  std::vector<double> load(static_cast<size_t>(threads), 0.0);
  double total = 0;
  for (double c : sorted) {
    *std::min_element(load.begin(), load.end()) += c;
    total += c;
  }
  return *std::max_element(load.begin(), load.end()) <= 1.1 * total / threads;
}

}  // namespace internal

namespace {

// One MLP on the calling thread alone (the kernels' regions, nested in
// RunMlps's, run on one thread).
void RunMlpHere(const MlpCall& m, std::vector<float>& gate, std::vector<float>& up) {
  const int64_t elems = m.rows * m.w->gate.rows();
  Grow(gate, elems);
  Grow(up, elems);
  const LinearCall gate_up[] = {{m.x, m.rows, &m.w->gate, nullptr, gate.data()},
                                {m.x, m.rows, &m.w->up, nullptr, up.data()}};
  LinearGroup(gate_up, 2);
  SwiGlu(gate.data(), up.data(), elems, gate.data());
  Linear(gate.data(), m.rows, m.w->down, nullptr, m.out);
}

// RunMlps's whole MLPs per thread; false (nothing run) where they do not
// share out evenly or nested regions would not run on one thread.
bool RunMlpsSharedOut(const MlpCall* calls, int64_t count, MlpScratch& s) {
  const int threads = omp_get_max_threads();
  if (threads < 2 || count < threads || omp_in_parallel() || omp_get_max_active_levels() > 1) {
    return false;
  }
  thread_local std::vector<double> costs;
  thread_local std::vector<int64_t> order;
  costs.clear();
  for (int64_t c = 0; c < count; ++c) {
    const MlpCall& m = calls[c];
    if (m.rows > internal::kShareMlpMaxRows) return false;
    const double bytes = static_cast<double>(m.w->gate.nbytes() + m.w->up.nbytes() +
                                             m.w->down.nbytes());
    costs.push_back(bytes * (1.0 + static_cast<double>(m.rows) / internal::kShareMlpMaxRows));
  }
  if (!internal::ShareMlpsOut(costs, threads)) return false;
  // The costliest first, each to whichever thread is free: the assignment
  // ShareMlpsOut judged, whatever the team's size turns out to be.
  order.resize(static_cast<size_t>(count));
  for (int64_t c = 0; c < count; ++c) order[static_cast<size_t>(c)] = c;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return costs[static_cast<size_t>(a)] > costs[static_cast<size_t>(b)];
  });
  if (static_cast<int>(s.thread_gate.size()) < threads) {
    s.thread_gate.resize(static_cast<size_t>(threads));
    s.thread_up.resize(static_cast<size_t>(threads));
  }
  // `order` is thread_local: the team reads it through this pointer.
  const int64_t* const next = order.data();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < count; ++i) {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    RunMlpHere(calls[next[i]], s.thread_gate[t], s.thread_up[t]);
  }
  return true;
}

// The calls' gates and ups as one LinearGroup, then their downs as another.
void RunMlpsGrouped(const MlpCall* calls, int64_t count, MlpScratch& s) {
  int64_t elems = 0;
  for (int64_t c = 0; c < count; ++c) elems += calls[c].rows * calls[c].w->gate.rows();
  Grow(s.gate, elems);
  Grow(s.up, elems);
  thread_local std::vector<LinearCall> linear;
  linear.clear();
  int64_t at = 0;
  for (int64_t c = 0; c < count; ++c) {
    const MlpCall& m = calls[c];
    linear.push_back({m.x, m.rows, &m.w->gate, nullptr, s.gate.data() + at});
    linear.push_back({m.x, m.rows, &m.w->up, nullptr, s.up.data() + at});
    at += m.rows * m.w->gate.rows();
  }
  LinearGroup(linear.data(), static_cast<int64_t>(linear.size()));
  SwiGlu(s.gate.data(), s.up.data(), elems, s.gate.data());
  linear.clear();
  at = 0;
  for (int64_t c = 0; c < count; ++c) {
    const MlpCall& m = calls[c];
    linear.push_back({s.gate.data() + at, m.rows, &m.w->down, nullptr, m.out});
    at += m.rows * m.w->gate.rows();
  }
  LinearGroup(linear.data(), static_cast<int64_t>(linear.size()));
}

}  // namespace

void RunMlps(const MlpCall* calls, int64_t count, MlpScratch& s) {
  if (RunMlpsSharedOut(calls, count, s)) return;
  // Groups of up to kGroupMaxRows rows (a call of more alone), so that the
  // scratch stays the size of a few rows' activations.
  int64_t first = 0;
  while (first < count) {
    int64_t last = first + 1, rows = calls[first].rows;
    while (last < count && rows + calls[last].rows <= internal::kGroupMaxRows) {
      rows += calls[last++].rows;
    }
    RunMlpsGrouped(calls + first, last - first, s);
    first = last;
  }
}

absl::StatusOr<MlpWeights> LoadMlp(const Checkpoint& ckpt, int64_t layer,
                                   const std::string& suffix, ComputeType prefer) {
  const std::string p = absl::StrCat("blk.", layer, ".");
  MlpWeights m;
  TANDEM_ASSIGN_OR_RETURN(m.gate, Load(ckpt, p + "ffn_gate" + suffix, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.up, Load(ckpt, p + "ffn_up" + suffix, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.down, Load(ckpt, p + "ffn_down" + suffix, prefer));
  return m;
}

absl::StatusOr<MlpWeights> LoadExpertMlp(const Checkpoint& ckpt, int64_t layer, int64_t expert,
                                         ComputeType prefer) {
  const std::string p = absl::StrCat("blk.", layer, ".");
  MlpWeights m;
  TANDEM_ASSIGN_OR_RETURN(m.gate, LoadExpert(ckpt, p + "ffn_gate_exps", expert, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.up, LoadExpert(ckpt, p + "ffn_up_exps", expert, prefer));
  TANDEM_ASSIGN_OR_RETURN(m.down, LoadExpert(ckpt, p + "ffn_down_exps", expert, prefer));
  return m;
}

}  // namespace tandem::ops
