#include "coordinator/loadgen/arrival_schedule.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace tandem::loadgen {

absl::StatusOr<std::vector<double>> ArrivalTimes(int num_requests, double request_rate,
                                                 double burstiness, uint64_t seed) {
  if (num_requests < 0) return absl::InvalidArgumentError("the number of requests is negative");
  if (!(request_rate > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-rate must be > 0 (or inf), got ", request_rate));
  }
  if (!(burstiness > 0) || std::isinf(burstiness)) {
    return absl::InvalidArgumentError(absl::StrCat("--burstiness must be > 0, got ", burstiness));
  }
  std::vector<double> out(static_cast<size_t>(num_requests), 0.0);
  if (std::isinf(request_rate)) return out;
  std::mt19937_64 rng(seed);
  // Gamma(shape k, scale θ) has mean kθ: θ = 1 / (rate k) keeps the mean gap.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0;
  for (size_t i = 1; i < out.size(); ++i) {
    t += gap(rng);
    out[i] = t;
  }
  return out;
}

}  // namespace tandem::loadgen
