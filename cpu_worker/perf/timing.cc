#include "cpu_worker/perf/timing.h"

#include <algorithm>

namespace tandem::perf {

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.n = static_cast<int64_t>(n);
  s.min = values.front();
  s.max = values.back();
  s.median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return s;
}

std::vector<double> Rates(double work, const std::vector<double>& seconds) {
  std::vector<double> r;
  r.reserve(seconds.size());
  for (double s : seconds) r.push_back(work / s);
  return r;
}

}  // namespace tandem::perf
