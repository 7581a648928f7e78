#include "coordinator/planner/klotski/klotski_inequalities.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::planner {

const char* KlotskiDeadlineName(KlotskiDeadline d) {
  switch (d) {
    case KlotskiDeadline::kGate:
      return "(I) gate";
    case KlotskiDeadline::kHotExperts:
      return "(II) hot experts";
    case KlotskiDeadline::kFirstCold:
      return "(III) first cold expert";
    case KlotskiDeadline::kNextAttention:
      return "(IV) next attention";
  }
  return "?";
}

bool KlotskiCheck::all() const {
  for (double s : slack_s) {
    if (!(s >= 0)) return false;
  }
  return true;
}

std::string KlotskiCheck::FirstFailure() const {
  for (int i = 0; i < kNumKlotskiDeadlines; ++i) {
    if (!(slack_s[i] >= 0)) {
      return absl::StrFormat(
          "%s short by %.3f ms",
          KlotskiDeadlineName(static_cast<KlotskiDeadline>(i)),
          -slack_s[i] * 1e3);
    }
  }
  return "";
}

std::string KlotskiCheck::ToString() const {
  std::string out;
  for (int i = 0; i < kNumKlotskiDeadlines; ++i) {
    absl::StrAppend(&out, i > 0 ? " " : "",
                    KlotskiDeadlineName(static_cast<KlotskiDeadline>(i)),
                    std::isinf(slack_s[i])
                        ? std::string(" vacuous")
                        : absl::StrFormat(" %+.3fms", slack_s[i] * 1e3));
  }
  return out;
}

absl::StatusOr<KlotskiCheck> CheckKlotskiInequalities(
    const KlotskiLayerTimes& t, int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Klotski: n must be >= 1, got ", n));
  }
  if (t.hot_experts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Klotski: K must be >= 0, got ", t.hot_experts));
  }
  auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad(t.attention_s) || bad(t.gate_s) || bad(t.hot_compute_s) ||
      bad(t.gate_io_s) || bad(t.expert_io_s) || bad(t.attention_io_s)) {
    return absl::InvalidArgumentError(
        "Klotski: layer times must be finite and >= 0");
  }
  for (double c : t.cold_compute_s) {
    if (bad(c)) {
      return absl::InvalidArgumentError(
          "Klotski: cold expert times must be finite and >= 0");
    }
  }

  const double nd = static_cast<double>(n);
  const double k = static_cast<double>(t.hot_experts);
  const double front = nd * (t.attention_s + t.gate_s);  // n·(t_cA + t_cG)
  KlotskiCheck c;
  c.slack_s[0] = nd * t.attention_s - t.gate_io_s;
  c.slack_s[1] = front - (t.gate_io_s + k * t.expert_io_s);

  const size_t q = t.cold_compute_s.size();
  // Cold expert m (1-based) starts after the front, the hot experts and the
  // m-1 cold experts before it; by then K + m experts must have arrived.
  // The transfers are serial on the one weight stream, as the paper assumes.
  auto cold_slack = [&](size_t m, double compute_before) {
    return compute_before -
           (t.gate_io_s + (k + static_cast<double>(m)) * t.expert_io_s);
  };
  double compute = front + t.hot_compute_s;
  c.slack_s[2] =
      q == 0 ? std::numeric_limits<double>::infinity() : cold_slack(1, compute);

  double worst = std::numeric_limits<double>::infinity();
  for (size_t m = 1; m <= q; ++m) {
    if (m >= 2) worst = std::min(worst, cold_slack(m, compute));
    compute += t.cold_compute_s[m - 1];
  }
  // The end of the block: every cold expert and the next attention's weights.
  const double final_slack =
      compute - (t.gate_io_s + (k + static_cast<double>(q)) * t.expert_io_s +
                 t.attention_io_s);
  c.slack_s[3] = std::min(worst, final_slack);
  return c;
}

}  // namespace tandem::planner
