#include "coordinator/frontend/metrics.h"

#include <sstream>
#include <utility>
#include <vector>

#include "prometheus/text_serializer.h"

namespace tandem::frontend {
namespace {

using prometheus::Histogram;

// vLLM's bucket boundaries.
const Histogram::BucketBoundaries& TtftBuckets() {
  static const Histogram::BucketBoundaries b = {
      0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return b;
}
const Histogram::BucketBoundaries& ItlBuckets() {
  static const Histogram::BucketBoundaries b = {
      0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return b;
}
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries b = {
      0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
      30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}
const Histogram::BucketBoundaries& TokenCountBuckets() {
  static const Histogram::BucketBoundaries b = {
      1,    2,    5,    10,    20,    50,    100,    200,   500,
      1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000};
  return b;
}
const Histogram::BucketBoundaries& StepBuckets() {
  static const Histogram::BucketBoundaries b = {
      0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075,
      0.1,   0.15,   0.2,   0.3,    0.5,  0.75,  1.0,  2.5,  5.0,  10.0};
  return b;
}

}  // namespace

Metrics::Metrics(std::string model_name)
    : model_(std::move(model_name)),
      registry_(std::make_shared<prometheus::Registry>()) {
  const prometheus::Labels model{{"model_name", model_}};
  auto& r = *registry_;
  auto hist = [&](const std::string& name, const std::string& help,
                  const Histogram::BucketBoundaries& b) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(
        model, b);
  };
  ttft_ = hist("vllm:time_to_first_token_seconds",
               "Histogram of time to first token in seconds.", TtftBuckets());
  itl_ = hist("vllm:inter_token_latency_seconds",
              "Histogram of inter-token latency in seconds.", ItlBuckets());
  e2e_ = hist("vllm:e2e_request_latency_seconds",
              "Histogram of end-to-end request latency in seconds.",
              LatencyBuckets());
  queue_ = hist("vllm:request_queue_time_seconds",
                "Histogram of time spent waiting in the queue in seconds.",
                LatencyBuckets());
  req_prompt_tokens_ = hist("vllm:request_prompt_tokens",
                            "Number of prefill tokens processed per request.",
                            TokenCountBuckets());
  req_gen_tokens_ = hist("vllm:request_generation_tokens",
                         "Number of generation tokens processed per request.",
                         TokenCountBuckets());
  prompt_tokens_ = &prometheus::BuildCounter()
                        .Name("vllm:prompt_tokens_total")
                        .Help("Number of prefill tokens processed.")
                        .Register(r)
                        .Add(model);
  gen_tokens_ = &prometheus::BuildCounter()
                     .Name("vllm:generation_tokens_total")
                     .Help("Number of generation tokens processed.")
                     .Register(r)
                     .Add(model);
  success_ = &prometheus::BuildCounter()
                  .Name("vllm:request_success_total")
                  .Help("Count of finished requests by finish reason.")
                  .Register(r);
  http_requests_ = &prometheus::BuildCounter()
                        .Name("tandem_http_requests_total")
                        .Help("HTTP requests by endpoint and status code.")
                        .Register(r);
  http_in_flight_ = &prometheus::BuildGauge()
                         .Name("tandem_http_requests_in_flight")
                         .Help("Generation requests being served over HTTP.")
                         .Register(r)
                         .Add({});
  running_ = &prometheus::BuildGauge()
                  .Name("vllm:num_requests_running")
                  .Help("Number of requests in model execution batches.")
                  .Register(r)
                  .Add(model);
  waiting_ = &prometheus::BuildGauge()
                  .Name("vllm:num_requests_waiting")
                  .Help("Number of requests waiting to be processed.")
                  .Register(r)
                  .Add(model);
  kv_usage_ = &prometheus::BuildGauge()
                   .Name("vllm:kv_cache_usage_perc")
                   .Help("KV-cache usage. 1 means 100 percent usage.")
                   .Register(r)
                   .Add(model);
  kv_blocks_used_ = &prometheus::BuildGauge()
                         .Name("tandem_kv_blocks_used")
                         .Help("KV cache blocks in use, by pool (gpu, cpu).")
                         .Register(r);
  kv_blocks_total_ =
      &prometheus::BuildGauge()
           .Name("tandem_kv_blocks_total")
           .Help("KV cache blocks available, by pool (gpu, cpu).")
           .Register(r);
  expert_cache_ = &prometheus::BuildGauge()
                       .Name("tandem_expert_cache_events")
                       .Help("The gpu_worker's expert cache since its model loaded, by event: "
                             "activations, hits, misses, loads, admitted, evictions, "
                             "prefetch_issued, prefetch_used, prefetch_wasted, gpu_computed, "
                             "cpu_computed.")
                       .Register(r);
  prefill_gpu_rows_ = &prometheus::BuildCounter()
                           .Name("tandem_prefill_gpu_rows_total")
                           .Help("Prefill rows whose CPU-side MLP rows ran on the GPU from a copy "
                                 "of their weights (ScheInfer's token assignment n_g).")
                           .Register(r)
                           .Add(model);
  micro_batched_steps_ = &prometheus::BuildCounter()
                              .Name("tandem_micro_batched_steps_total")
                              .Help("Steps the workers ran as more than one micro-batch (Neo's "
                                    "sub-batches, MoE-Lightning's micro-batches).")
                              .Register(r)
                              .Add(model);
  prefix_queries_ = &prometheus::BuildCounter()
                         .Name("vllm:prefix_cache_queries_total")
                         .Help("Prefix cache queries, in terms of number of queried tokens.")
                         .Register(r)
                         .Add(model);
  prefix_hits_ = &prometheus::BuildCounter()
                      .Name("vllm:prefix_cache_hits_total")
                      .Help("Prefix cache hits, in terms of number of cached tokens.")
                      .Register(r)
                      .Add(model);
  auto& masks = prometheus::BuildCounter()
                    .Name("tandem_structured_masks_total")
                    .Help(
                        "Token masks of structured outputs (JSON mode, JSON Schema, choices, "
                        "forced tool calls), by source: cache (a state seen before, by this "
                        "or an earlier request with the same schema) or computed.")
                    .Register(r);
  masks_cached_ = &masks.Add({{"model_name", model_}, {"source", "cache"}});
  masks_computed_ = &masks.Add({{"model_name", model_}, {"source", "computed"}});
  worker_step_ = &prometheus::BuildHistogram()
                      .Name("tandem_worker_step_seconds")
                      .Help("Time of one step on each worker in seconds.")
                      .Register(r);
  for (const char* pool : {"gpu", "cpu"}) {
    kv_blocks_used_->Add({{"pool", pool}});
    kv_blocks_total_->Add({{"pool", pool}});
  }
}

void Metrics::ObserveTimeToFirstToken(double s) { ttft_->Observe(s); }
void Metrics::ObserveInterTokenLatency(double s) { itl_->Observe(s); }
void Metrics::ObserveE2eLatency(double s) { e2e_->Observe(s); }
void Metrics::ObserveQueueTime(double s) { queue_->Observe(s); }
void Metrics::AddPromptTokens(int64_t n) {
  if (n > 0) prompt_tokens_->Increment(static_cast<double>(n));
}
void Metrics::AddGenerationTokens(int64_t n) {
  if (n > 0) gen_tokens_->Increment(static_cast<double>(n));
}

void Metrics::RequestFinished(std::string_view finish_reason,
                              int64_t prompt_tokens,
                              int64_t generation_tokens) {
  success_
      ->Add({{"model_name", model_},
             {"finished_reason", std::string(finish_reason)}})
      .Increment();
  req_prompt_tokens_->Observe(static_cast<double>(prompt_tokens));
  req_gen_tokens_->Observe(static_cast<double>(generation_tokens));
}

void Metrics::CountHttpRequest(std::string_view endpoint, int status) {
  http_requests_
      ->Add({{"endpoint", std::string(endpoint)},
             {"code", std::to_string(status)}})
      .Increment();
}
void Metrics::SetHttpInFlight(int64_t n) {
  http_in_flight_->Set(static_cast<double>(n));
}

void Metrics::SetNumRequestsRunning(int64_t n) {
  running_->Set(static_cast<double>(n));
}
void Metrics::SetNumRequestsWaiting(int64_t n) {
  waiting_->Set(static_cast<double>(n));
}
void Metrics::SetKvCacheUsage(double fraction) { kv_usage_->Set(fraction); }

void Metrics::SetKvBlocks(std::string_view pool, int64_t used, int64_t total) {
  prometheus::Labels l{{"pool", std::string(pool)}};
  kv_blocks_used_->Add(l).Set(static_cast<double>(used));
  kv_blocks_total_->Add(l).Set(static_cast<double>(total));
}

void Metrics::SetExpertCacheEvent(std::string_view event, int64_t count) {
  expert_cache_->Add({{"event", std::string(event)}}).Set(static_cast<double>(count));
}

void Metrics::ObserveWorkerStep(std::string_view worker, double seconds) {
  worker_step_->Add({{"worker", std::string(worker)}}, StepBuckets())
      .Observe(seconds);
}

void Metrics::AddPrefillGpuRows(int64_t n) {
  if (n > 0) prefill_gpu_rows_->Increment(static_cast<double>(n));
}

void Metrics::ObserveMicroBatches(int64_t micro_batches) {
  if (micro_batches > 1) micro_batched_steps_->Increment();
}

void Metrics::SetPrefixCacheTotals(int64_t queries, int64_t hits) {
  // Totals only grow; a counter takes the difference.
  const double dq = static_cast<double>(queries) - prefix_queries_->Value();
  const double dh = static_cast<double>(hits) - prefix_hits_->Value();
  if (dq > 0) prefix_queries_->Increment(dq);
  if (dh > 0) prefix_hits_->Increment(dh);
}

void Metrics::SetStructuredMaskTotals(int64_t cached, int64_t computed) {
  auto advance = [](prometheus::Counter* c, int64_t total) {
    const double d = static_cast<double>(total) - c->Value();
    if (d > 0) c->Increment(d);
  };
  advance(masks_cached_, cached);
  advance(masks_computed_, computed);
}

void Metrics::SetCollectHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(hook_mu_);
  hook_ = std::move(hook);
}

std::string Metrics::Serialize() {
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(hook_mu_);
    hook = hook_;
  }
  if (hook) hook();
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace tandem::frontend
