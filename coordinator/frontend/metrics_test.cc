// The Prometheus exposition: names (vLLM's and ours), labels, and a parse of
// every line of the text format.
#include "coordinator/frontend/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>

namespace tandem::frontend {
namespace {

// Parses the text format strictly enough to catch malformed output:
// "# HELP name text", "# TYPE name kind", or "name{l="v",...} value".
// Returns sample name+labels -> value.
std::map<std::string, double> ParseExposition(const std::string& text) {
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})? (\S+)$)");
  static const std::regex kMeta(
      R"(^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::smatch m;
    if (line[0] == '#') {
      EXPECT_TRUE(std::regex_match(line, m, kMeta)) << line;
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      ADD_FAILURE() << "bad sample line: " << line;
      continue;
    }
    const std::string value = m[4].str();
    double v = value == "+Inf" ? 1e300 : std::stod(value);
    out[m[1].str() + m[2].str()] = v;
  }
  return out;
}

TEST(FrontendMetricsTest, ExportsVllmNamesAndOurs) {
  Metrics m("tiny");
  m.ObserveTimeToFirstToken(0.05);
  m.ObserveInterTokenLatency(0.02);
  m.ObserveE2eLatency(1.2);
  m.ObserveQueueTime(0.01);
  m.AddPromptTokens(7);
  m.AddGenerationTokens(3);
  m.AddGenerationTokens(2);
  m.RequestFinished("stop", 7, 5);
  m.RequestFinished("length", 7, 5);
  m.RequestFinished("stop", 1, 1);
  m.SetNumRequestsRunning(4);
  m.SetNumRequestsWaiting(2);
  m.SetKvCacheUsage(0.25);
  m.SetKvBlocks("gpu", 10, 40);
  m.SetKvBlocks("cpu", 3, 100);
  m.ObserveWorkerStep("gpu0", 0.012);
  m.ObserveWorkerStep("cpu0", 0.030);
  m.CountHttpRequest("/v1/completions", 200);
  // Totals, as the step driver reports them: the counters follow.
  m.SetStructuredMaskTotals(5, 2);
  m.SetStructuredMaskTotals(9, 3);
  int hook_calls = 0;
  m.SetCollectHook([&] { ++hook_calls; });

  const std::string text = m.Serialize();
  EXPECT_EQ(hook_calls, 1);
  auto samples = ParseExposition(text);
  const std::string model = R"(model_name="tiny")";
  EXPECT_EQ(samples["vllm:prompt_tokens_total{" + model + "}"], 7);
  EXPECT_EQ(samples["vllm:generation_tokens_total{" + model + "}"], 5);
  EXPECT_EQ(samples[R"(vllm:request_success_total{finished_reason="stop",)" +
                    model + "}"],
            2);
  EXPECT_EQ(samples[R"(vllm:request_success_total{finished_reason="length",)" +
                    model + "}"],
            1);
  EXPECT_EQ(samples["vllm:num_requests_running{" + model + "}"], 4);
  EXPECT_EQ(samples["vllm:num_requests_waiting{" + model + "}"], 2);
  EXPECT_EQ(samples["tandem_structured_masks_total{" + model + R"(,source="cache"})"], 9);
  EXPECT_EQ(samples["tandem_structured_masks_total{" + model + R"(,source="computed"})"], 3);
  EXPECT_EQ(samples["vllm:kv_cache_usage_perc{" + model + "}"], 0.25);
  EXPECT_EQ(samples[R"(tandem_kv_blocks_used{pool="gpu"})"], 10);
  EXPECT_EQ(samples[R"(tandem_kv_blocks_used{pool="cpu"})"], 3);
  EXPECT_EQ(samples[R"(tandem_kv_blocks_total{pool="cpu"})"], 100);
  EXPECT_EQ(samples["vllm:time_to_first_token_seconds_count{" + model + "}"],
            1);
  EXPECT_EQ(samples["vllm:time_to_first_token_seconds_sum{" + model + "}"],
            0.05);
  EXPECT_EQ(samples["vllm:inter_token_latency_seconds_count{" + model + "}"],
            1);
  EXPECT_EQ(samples["vllm:e2e_request_latency_seconds_count{" + model + "}"],
            1);
  EXPECT_EQ(samples["vllm:request_queue_time_seconds_count{" + model + "}"], 1);
  EXPECT_EQ(samples["vllm:request_prompt_tokens_count{" + model + "}"], 3);
  EXPECT_EQ(samples["vllm:request_generation_tokens_sum{" + model + "}"], 11);
  EXPECT_EQ(samples[R"(tandem_worker_step_seconds_count{worker="gpu0"})"], 1);
  EXPECT_EQ(samples[R"(tandem_worker_step_seconds_count{worker="cpu0"})"], 1);
  EXPECT_EQ(
      samples
          [R"(tandem_http_requests_total{code="200",endpoint="/v1/completions"})"],
      1);
  // A bucket line: TTFT 0.05 falls in le=0.06 but not le=0.04.
  EXPECT_EQ(samples["vllm:time_to_first_token_seconds_bucket{" + model +
                    R"(,le="0.06"})"],
            1);
  EXPECT_EQ(samples["vllm:time_to_first_token_seconds_bucket{" + model +
                    R"(,le="0.04"})"],
            0);
  EXPECT_NE(text.find("# TYPE vllm:time_to_first_token_seconds histogram"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:num_requests_running gauge"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:prompt_tokens_total counter"),
            std::string::npos);
}

TEST(FrontendMetricsTest, FreshRegistrySerializes) {
  Metrics m("x");
  auto samples = ParseExposition(m.Serialize());
  EXPECT_EQ(samples[R"(vllm:num_requests_running{model_name="x"})"], 0);
  EXPECT_EQ(samples[R"(tandem_kv_blocks_used{pool="gpu"})"], 0);
}

}  // namespace
}  // namespace tandem::frontend
