#include "coordinator/loadgen/request_record.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace tandem::loadgen {
namespace {

using ojson = nlohmann::ordered_json;

struct Moments {
  double mean = 0, median = 0, std = 0;
};

Moments MomentsOf(const std::vector<double>& v) {
  Moments m;
  if (v.empty()) return m;
  double sum = 0;
  for (double x : v) sum += x;
  m.mean = sum / static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(sq / static_cast<double>(v.size()));  // numpy's std (ddof 0)
  m.median = Percentile(v, 50);
  return m;
}

// "99" -> "p99", "99.9" -> "p99.9" (vLLM's key names).
std::string PercentileKey(double p) {
  std::string s = absl::StrFormat("%g", p);
  return "p" + s;
}

void AddMetric(ojson& out, const std::string& name, const std::vector<double>& values_ms,
               const std::vector<double>& percentiles) {
  const Moments m = MomentsOf(values_ms);
  out["mean_" + name + "_ms"] = m.mean;
  out["median_" + name + "_ms"] = m.median;
  out["std_" + name + "_ms"] = m.std;
  for (double p : percentiles) {
    out[PercentileKey(p) + "_" + name + "_ms"] = Percentile(values_ms, p);
  }
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

ojson Summarize(const std::vector<RequestRecord>& records, double duration_s,
                const SummaryOptions& options) {
  int64_t completed = 0, failed = 0, input = 0, output = 0, good = 0;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++failed;
      continue;
    }
    ++completed;
    input += r.prompt_len;
    output += r.output_len;
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.e2el_s * 1e3);
    double tpot_ms = 0;
    if (r.output_len > 1) {
      tpot_ms = (r.e2el_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_len - 1);
      tpot.push_back(tpot_ms);
    }
    for (double x : r.itl_s) itl.push_back(x * 1e3);
    const Slo& slo = options.goodput;
    const bool meets = (slo.ttft_ms <= 0 || r.ttft_s * 1e3 <= slo.ttft_ms) &&
                       (slo.tpot_ms <= 0 || tpot_ms <= slo.tpot_ms) &&
                       (slo.e2el_ms <= 0 || r.e2el_s * 1e3 <= slo.e2el_ms);
    good += meets ? 1 : 0;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  ojson out;
  out["duration"] = duration_s;
  out["completed"] = completed;
  out["failed"] = failed;
  out["total_input_tokens"] = input;
  out["total_output_tokens"] = output;
  out["request_throughput"] = static_cast<double>(completed) / d;
  const Slo& slo = options.goodput;
  const bool with_goodput = slo.ttft_ms > 0 || slo.tpot_ms > 0 || slo.e2el_ms > 0;
  out["request_goodput"] = with_goodput ? ojson(static_cast<double>(good) / d) : ojson(nullptr);
  out["output_throughput"] = static_cast<double>(output) / d;
  out["total_token_throughput"] = static_cast<double>(input + output) / d;
  AddMetric(out, "ttft", ttft, options.percentiles);
  AddMetric(out, "tpot", tpot, options.percentiles);
  AddMetric(out, "itl", itl, options.percentiles);
  AddMetric(out, "e2el", e2el, options.percentiles);
  return out;
}

std::string FormatSummary(const ojson& s, const std::vector<double>& percentiles) {
  std::string out;
  auto line = [&out](const std::string& label, const std::string& value) {
    absl::StrAppendFormat(&out, "%-40s %s\n", label + ":", value);
  };
  auto num = [](const ojson& v, int digits) {
    return v.is_null() ? std::string("-") : absl::StrFormat("%.*f", digits, v.get<double>());
  };
  auto rule = [&out](const std::string& title) {
    const int width = 50, left = (width - static_cast<int>(title.size())) / 2;
    out += std::string(std::max(left, 0), '-') + title +
           std::string(std::max(width - left - static_cast<int>(title.size()), 0), '-') + "\n";
  };
  out += "============ Serving Benchmark Result ============\n";
  line("Successful requests", std::to_string(s["completed"].get<int64_t>()));
  line("Failed requests", std::to_string(s["failed"].get<int64_t>()));
  line("Benchmark duration (s)", num(s["duration"], 2));
  line("Total input tokens", std::to_string(s["total_input_tokens"].get<int64_t>()));
  line("Total generated tokens", std::to_string(s["total_output_tokens"].get<int64_t>()));
  line("Request throughput (req/s)", num(s["request_throughput"], 2));
  if (!s["request_goodput"].is_null())
    line("Request goodput (req/s)", num(s["request_goodput"], 2));
  line("Output token throughput (tok/s)", num(s["output_throughput"], 2));
  line("Total Token throughput (tok/s)", num(s["total_token_throughput"], 2));
  const struct {
    const char* key;
    const char* title;
    const char* name;
  } kMetrics[] = {{"ttft", "Time to First Token", "TTFT"},
                  {"tpot", "Time per Output Token (excl. 1st token)", "TPOT"},
                  {"itl", "Inter-token Latency", "ITL"},
                  {"e2el", "End-to-end Latency", "E2EL"}};
  for (const auto& m : kMetrics) {
    rule(m.title);
    const std::string k = m.key;
    line(absl::StrFormat("Mean %s (ms)", m.name), num(s["mean_" + k + "_ms"], 2));
    line(absl::StrFormat("Median %s (ms)", m.name), num(s["median_" + k + "_ms"], 2));
    for (double p : percentiles) {
      line(absl::StrFormat("P%g %s (ms)", p, m.name),
           num(s[PercentileKey(p) + "_" + k + "_ms"], 2));
    }
  }
  out += "==================================================\n";
  return out;
}

}  // namespace tandem::loadgen
