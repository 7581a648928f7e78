#include "coordinator/loadgen/request_record.h"

#include "gtest/gtest.h"

namespace tandem::loadgen {
namespace {

TEST(RequestRecord, PercentileInterpolatesAsNumpy) {
  // numpy.percentile([1, 2, 3, 4], [0, 50, 99, 100]) = 1, 2.5, 3.97, 4
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_NEAR(Percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 99), 0);
}

// Two good requests and a failed one, worked out by hand.
TEST(RequestRecord, SummaryFigures) {
  RequestRecord a;
  a.ok = true;
  a.prompt_len = 10;
  a.output_len = 3;
  a.ttft_s = 0.1;
  a.e2el_s = 0.3;  // tpot (0.3 - 0.1) / 2 = 100 ms
  a.itl_s = {0.05, 0.15};
  RequestRecord b;
  b.ok = true;
  b.prompt_len = 20;
  b.output_len = 1;  // no tpot
  b.ttft_s = 0.3;
  b.e2el_s = 0.3;
  RequestRecord c;
  c.error = "HTTP 503";
  SummaryOptions opts;
  opts.percentiles = {50, 99};
  opts.goodput.ttft_ms = 200;  // a meets it, b does not
  const nlohmann::ordered_json s = Summarize({a, b, c}, 2.0, opts);
  EXPECT_EQ(s["completed"], 2);
  EXPECT_EQ(s["failed"], 1);
  EXPECT_EQ(s["total_input_tokens"], 30);
  EXPECT_EQ(s["total_output_tokens"], 4);
  EXPECT_DOUBLE_EQ(s["request_throughput"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["request_goodput"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["output_throughput"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["total_token_throughput"].get<double>(), 17.0);
  EXPECT_NEAR(s["mean_ttft_ms"].get<double>(), 200, 1e-9);
  EXPECT_NEAR(s["median_ttft_ms"].get<double>(), 200, 1e-9);
  EXPECT_NEAR(s["std_ttft_ms"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(s["p99_ttft_ms"].get<double>(), 298, 1e-9);
  EXPECT_NEAR(s["mean_tpot_ms"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(s["mean_itl_ms"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(s["p50_itl_ms"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(s["mean_e2el_ms"].get<double>(), 300, 1e-9);
  // Without an SLO there is no goodput.
  EXPECT_TRUE(Summarize({a}, 1.0, SummaryOptions())["request_goodput"].is_null());

  const std::string text = FormatSummary(s, opts.percentiles);
  EXPECT_NE(text.find("Successful requests:                     2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Request goodput (req/s):                 0.50\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("P99 TTFT (ms):                           298.00\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("---------------Inter-token Latency----------------\n"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace tandem::loadgen
