// Repeat-and-summarise helpers shared by the start-up profiler (best of a
// few runs) and `tandem bench` (median, min and max of many): one place that
// times a callable, so both report the same thing under the same name.
#ifndef TANDEM_CPU_WORKER_PERF_TIMING_H_
#define TANDEM_CPU_WORKER_PERF_TIMING_H_

#include <chrono>
#include <cstdint>
#include <vector>

namespace tandem::perf {

// Median, extremes and count of a set of samples (all zero when empty).
struct Summary {
  double median = 0;  // of an even count: the mean of the middle two
  double min = 0;
  double max = 0;
  int64_t n = 0;
};

Summary Summarize(std::vector<double> values);

// Wall seconds of each of `repeats` calls of fn, after `warmup` untimed
// calls (first touch of buffers, oneDNN primitive creation, page faults of a
// fresh mapping). Never returns a zero duration.
template <typename Fn>
std::vector<double> TimeRepeats(int warmup, int repeats, Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(repeats > 0 ? repeats : 0));
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    seconds.push_back(s > 1e-9 ? s : 1e-9);
  }
  return seconds;
}

// work / seconds for each sample (e.g. bytes or FLOPs per second).
std::vector<double> Rates(double work, const std::vector<double>& seconds);

}  // namespace tandem::perf

#endif  // TANDEM_CPU_WORKER_PERF_TIMING_H_
