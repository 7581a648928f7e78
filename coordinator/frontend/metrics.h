// Prometheus metrics of the serving path, exported at GET /metrics in the
// text format. Names follow vLLM (label model_name) so existing dashboards
// work, plus Tandem's own (tandem_*):
//   histograms vllm:time_to_first_token_seconds,
//   vllm:inter_token_latency_seconds,
//     vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds,
//     vllm:request_prompt_tokens, vllm:request_generation_tokens,
//     tandem_worker_step_seconds{worker}
//   counters vllm:prompt_tokens_total, vllm:generation_tokens_total,
//     vllm:request_success_total{finished_reason},
//     tandem_http_requests_total{endpoint,code},
//     tandem_prefill_gpu_rows_total (prefill rows whose CPU-side MLP rows
//     ran on the GPU instead: ScheInfer's token assignment n_g),
//     tandem_micro_batched_steps_total (steps run as more than one
//     micro-batch: Neo's sub-batches or MoE-Lightning's micro-batches),
//     vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total (prompt
//     tokens looked up in the prefix cache, and found),
//     tandem_structured_masks_total{source} (token masks of structured
//     outputs: from the cache, or computed)
//   gauges vllm:num_requests_running, vllm:num_requests_waiting,
//     vllm:kv_cache_usage_perc (0..1), tandem_kv_blocks_used{pool},
//     tandem_kv_blocks_total{pool}, tandem_http_requests_in_flight,
//     tandem_expert_cache_events{event} (the gpu_worker's expert cache:
//     hits, misses, loads, prefetch_issued/used/wasted, ... since its model
//     loaded)
// The frontend records the per-request figures; the scheduler / step driver
// calls the Set*/Observe* functions below (all thread-safe).
#ifndef TANDEM_COORDINATOR_FRONTEND_METRICS_H_
#define TANDEM_COORDINATOR_FRONTEND_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem::frontend {

class Metrics {
 public:
  explicit Metrics(std::string model_name);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // --- per request (the frontend) ---
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveE2eLatency(double seconds);
  void ObserveQueueTime(double seconds);
  void AddPromptTokens(int64_t n);
  void AddGenerationTokens(int64_t n);
  // A finished request: finish reason "stop" | "length" | "abort" | "error",
  // and its token counts (for the per-request histograms).
  void RequestFinished(std::string_view finish_reason, int64_t prompt_tokens,
                       int64_t generation_tokens);
  void CountHttpRequest(std::string_view endpoint, int status);
  void SetHttpInFlight(int64_t n);

  // --- the scheduler / step driver ---
  void SetNumRequestsRunning(int64_t n);
  void SetNumRequestsWaiting(int64_t n);
  void SetKvCacheUsage(double fraction);  // GPU KV blocks in use, 0..1
  // pool: "gpu" or "cpu".
  void SetKvBlocks(std::string_view pool, int64_t used, int64_t total);
  void SetExpertCacheEvent(std::string_view event, int64_t count);
  void ObserveWorkerStep(std::string_view worker, double seconds);
  void AddPrefillGpuRows(int64_t n);
  // A step the workers ran as `micro_batches` micro-batches (counted when > 1).
  void ObserveMicroBatches(int64_t micro_batches);
  // The scheduler's prefix cache totals since start (the counters follow).
  void SetPrefixCacheTotals(int64_t queries, int64_t hits);
  // Token masks of structured outputs since start: from the cache, computed.
  void SetStructuredMaskTotals(int64_t cached, int64_t computed);

  // Called at the start of every scrape (e.g. to refresh gauges lazily).
  void SetCollectHook(std::function<void()> hook);

  // The text exposition of every metric.
  std::string Serialize();

  prometheus::Registry& registry() { return *registry_; }

 private:
  std::string model_;
  std::shared_ptr<prometheus::Registry> registry_;

  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* req_prompt_tokens_;
  prometheus::Histogram* req_gen_tokens_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* gen_tokens_;
  prometheus::Family<prometheus::Counter>* success_;
  prometheus::Family<prometheus::Counter>* http_requests_;
  prometheus::Gauge* http_in_flight_;
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Family<prometheus::Gauge>* kv_blocks_used_;
  prometheus::Family<prometheus::Gauge>* kv_blocks_total_;
  prometheus::Family<prometheus::Gauge>* expert_cache_;
  prometheus::Family<prometheus::Histogram>* worker_step_;
  prometheus::Counter* prefill_gpu_rows_;
  prometheus::Counter* micro_batched_steps_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Counter* masks_cached_;
  prometheus::Counter* masks_computed_;

  std::mutex hook_mu_;
  std::function<void()> hook_;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_METRICS_H_
