#include "coordinator/service/driver_metrics.h"

#include <algorithm>
#include <utility>

namespace tandem::coord {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1, 0) {}

Histogram Histogram::ForStepSeconds() {
  return Histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                    1.0, 2.5, 5.0, 10.0, 25.0, 60.0});
}

void Histogram::Observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++buckets_[static_cast<size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += value;
}

std::vector<int64_t> Histogram::cumulative_counts() const {
  std::vector<int64_t> out(buckets_.size());
  int64_t total = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    total += buckets_[i];
    out[i] = total;
  }
  return out;
}

}  // namespace tandem::coord
