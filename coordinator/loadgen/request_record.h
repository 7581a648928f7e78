// What one benchmark request measured, and the summary of a run with the
// field names of `vllm bench serve` (mean_ttft_ms, p99_itl_ms, ...), so that
// scripts written for it read Tandem's output unchanged.
#ifndef TANDEM_COORDINATOR_LOADGEN_REQUEST_RECORD_H_
#define TANDEM_COORDINATOR_LOADGEN_REQUEST_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace tandem::loadgen {

struct RequestRecord {
  bool ok = false;
  std::string error;          // why it failed (HTTP status and message)
  int64_t prompt_len = 0;     // the server's usage.prompt_tokens (else the dataset's)
  int64_t output_len = 0;     // usage.completion_tokens (else the chunks with text)
  double ttft_s = 0;          // send to the first chunk with text
  double e2el_s = 0;          // send to the end of the stream
  std::vector<double> itl_s;  // between successive chunks with text
};

// Service-level objectives for goodput (vLLM's --goodput): a request counts
// when it meets every one given (<= 0: not given).
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2el_ms = 0;
};

struct SummaryOptions {
  std::vector<double> percentiles = {99};  // --metric-percentiles
  Slo goodput;
};

// The run's figures: duration, completed, failed, token totals and
// throughputs, request_goodput (when an SLO is given), and for each of ttft,
// tpot (per request, excluding the first token), itl and e2el the mean,
// median, std and each percentile in ms. Percentiles interpolate linearly
// between order statistics (numpy's default, as vLLM computes them).
nlohmann::ordered_json Summarize(const std::vector<RequestRecord>& records, double duration_s,
                                 const SummaryOptions& options);

// The summary as `vllm bench serve` prints it.
std::string FormatSummary(const nlohmann::ordered_json& summary,
                          const std::vector<double>& percentiles);

// numpy.percentile(values, p) with linear interpolation; 0 for no values.
double Percentile(std::vector<double> values, double p);

}  // namespace tandem::loadgen

#endif  // TANDEM_COORDINATOR_LOADGEN_REQUEST_RECORD_H_
