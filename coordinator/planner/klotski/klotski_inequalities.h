// Klotski's four deadlines (paper §2, Fig. 9, eqs. 4–7): in one MoE block of
// a group of n batches, every transfer must have landed before the compute
// that needs it starts. The planner takes the smallest n for which all four
// hold (and the memory model allows); this file is only the check, on
// figures already turned into seconds, so a test can evaluate it by hand.
//
//   (I)   gate starts:      n·t_cA >= t_IO,G
//   (II)  hot experts start:
//           n·(t_cA + t_cG) >= t_IO,G + K·t_IO,E
//   (III) first cold expert starts:
//           n·(t_cA + t_cG) + t_c,hot >= t_IO,G + (K+1)·t_IO,E
//   (IV)  next attention starts:
//           n·(t_cA + t_cG) + t_c,hot + Σ_Q t_c,Ei
//               >= t_IO,G + (K+|Q|)·t_IO,E + t_IO,A
//
// (IV) is checked on every prefix of the cold queue as well (the digest's
// advice: cold expert m must have arrived when the compute before it ends),
// so a long queue cannot hide an early late arrival behind a late surplus.
#ifndef TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_INEQUALITIES_H_
#define TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_INEQUALITIES_H_

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::planner {

// The figures of one MoE block for one group (they depend on n through the
// expert work: more batches route more tokens to each expert).
struct KlotskiLayerTimes {
  // t_cA: attention of one batch (including waiting for its KV).
  double attention_s = 0;
  // t_cG: post-attention norm + router of one batch.
  double gate_s = 0;
  // t_c,hot-E: the K hot experts over the group's tokens routed to them.
  double hot_compute_s = 0;
  // t_c,Ei of the cold queue Q, in load order.
  std::vector<double> cold_compute_s;
  double gate_io_s = 0;    // t_IO,G (0 when the gates stay on the GPU)
  double expert_io_s = 0;  // t_IO,E: one expert over the link
  // t_IO,A: the next layer's attention weights (0 when resident).
  double attention_io_s = 0;
  int hot_experts = 0;  // K
};

enum class KlotskiDeadline {
  kGate = 0,           // (I)
  kHotExperts = 1,     // (II)
  kFirstCold = 2,      // (III)
  kNextAttention = 3,  // (IV)
};
inline constexpr int kNumKlotskiDeadlines = 4;
const char* KlotskiDeadlineName(KlotskiDeadline d);

struct KlotskiCheck {
  // Compute time before the deadline minus the transfer time due by then;
  // the inequality holds when it is >= 0. (III) is +infinity when Q is empty
  // (no cold expert: the paper's best case).
  std::array<double, kNumKlotskiDeadlines> slack_s{};

  bool holds(KlotskiDeadline d) const {
    return slack_s[static_cast<int>(d)] >= 0;
  }
  bool all() const;
  // The first deadline that fails, for a rationale; empty when all hold.
  std::string FirstFailure() const;
  std::string ToString() const;  // "(I) +1.2ms (II) -0.3ms ..."
};

// InvalidArgument for n < 1, K < 0 or a negative or non-finite figure.
absl::StatusOr<KlotskiCheck> CheckKlotskiInequalities(
    const KlotskiLayerTimes& t, int n);

}  // namespace tandem::planner

#endif  // TANDEM_COORDINATOR_PLANNER_KLOTSKI_KLOTSKI_INEQUALITIES_H_
