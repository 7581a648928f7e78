// What the step driver reports about itself: queue and KV figures, counters,
// and a histogram of step times (the worker's Step RPC as the driver sees
// it). A snapshot is a plain struct, so a metrics exporter (the frontend's
// Prometheus registry) can copy it at scrape time; StepStats go to an
// optional callback after every step.
#ifndef TANDEM_COORDINATOR_SERVICE_DRIVER_METRICS_H_
#define TANDEM_COORDINATOR_SERVICE_DRIVER_METRICS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem::coord {

// Cumulative histogram in the Prometheus manner: counts[i] counts the
// observations <= bounds[i]; the last entry of counts (one more than
// bounds) counts all of them.
class Histogram {
 public:
  // `bounds`: increasing upper bounds.
  explicit Histogram(std::vector<double> bounds);
  // 1 ms .. 60 s, roughly x2.5 apart.
  static Histogram ForStepSeconds();

  void Observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts, bounds().size() + 1 entries (the last: +Inf).
  std::vector<int64_t> cumulative_counts() const;
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> buckets_;  // non-cumulative, bounds_.size() + 1
  int64_t count_ = 0;
  double sum_ = 0.0;
};

// One step, as it ran.
struct StepStats {
  int64_t step_id = 0;
  int64_t num_sequences = 0;
  int64_t num_tokens = 0;          // batched tokens
  int64_t num_prefill_tokens = 0;  // of which in prefill chunks
  int64_t num_decode_tokens = 0;
  double wall_seconds = 0.0;    // the Step RPC, as the driver timed it
  double worker_seconds = 0.0;  // StepResult.step_seconds
  int64_t prefill_gpu_rows = 0;  // StepResult.prefill_gpu_rows (ScheInfer's n_g)
  // Micro-batches the worker ran the step as: Neo's sub-batches
  // (StepPlan.micro_batch_sizes) or MoE-Lightning's mu.
  int64_t micro_batches = 1;
  bool ok = true;               // false: the step failed
};

struct DriverMetrics {
  int64_t num_waiting = 0;
  int64_t num_running = 0;
  int64_t gpu_kv_blocks_used = 0;
  int64_t gpu_kv_blocks_total = 0;
  double gpu_kv_usage = 0.0;  // used / total
  int64_t cpu_kv_blocks_used = 0;
  int64_t cpu_kv_blocks_total = 0;
  double cpu_kv_usage = 0.0;
  int64_t num_preemptions = 0;   // since start
  int64_t num_requests_finished = 0;
  int64_t num_steps = 0;         // steps that ran
  int64_t num_step_failures = 0;
  int64_t num_worker_losses = 0;  // gpu_worker deaths or failed steps
  int64_t num_model_loads = 0;    // successful LoadModel calls
  int64_t generated_tokens = 0;   // sampled tokens, all requests
  int64_t prompt_tokens = 0;      // prompt tokens run (recomputes included)
  // Prefix caching: tokens of admitted requests looked up, and found.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  // Token masks of structured outputs: given from the cache, and computed.
  int64_t structured_masks_cached = 0;
  int64_t structured_masks_computed = 0;
  bool ready = false;             // a gpu_worker is loaded and serving
  std::string worker_id;          // the gpu_worker in use ("" if none)
  std::string worker_address;
  std::string last_error;         // last load / worker failure
  Histogram step_seconds = Histogram::ForStepSeconds();
  // The gpu_worker's expert cache counters (event name, count since its
  // model loaded), from its last step; empty without a cache.
  std::vector<std::pair<std::string, int64_t>> expert_cache;
};

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_DRIVER_METRICS_H_
