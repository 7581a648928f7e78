// When each benchmark request is sent, as `vllm bench serve` spaces them:
// at `request_rate` requests per second on average, the gaps drawn from a
// gamma distribution of shape `burstiness` and mean 1 / request_rate
// (burstiness 1: a Poisson process; < 1 burstier, > 1 more even); an
// infinite rate sends every request at once.
#ifndef TANDEM_COORDINATOR_LOADGEN_ARRIVAL_SCHEDULE_H_
#define TANDEM_COORDINATOR_LOADGEN_ARRIVAL_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::loadgen {

// Send times in seconds from the start, non-decreasing, the first at 0.
// InvalidArgument unless num_requests >= 0, request_rate > 0 (inf allowed)
// and burstiness > 0.
absl::StatusOr<std::vector<double>> ArrivalTimes(int num_requests, double request_rate,
                                                 double burstiness, uint64_t seed);

}  // namespace tandem::loadgen

#endif  // TANDEM_COORDINATOR_LOADGEN_ARRIVAL_SCHEDULE_H_
