#include "cli/bench_serve_command.h"

#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/flag_sources.h"
#include "common/status_macros.h"
#include "coordinator/loadgen/serve_benchmark.h"

namespace tandem::cli {
namespace {

absl::StatusOr<double> ParseRate(const std::string& s) {
  if (s == "inf" || s == "INF" || s == "Infinity") return INFINITY;
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !(v > 0) || std::isinf(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-rate must be a number > 0 or inf, got '", s, "'"));
  }
  return v;
}

absl::StatusOr<std::vector<double>> ParsePercentiles(const std::string& s) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(s, ',')) {
    double p = 0;
    if (!absl::SimpleAtod(part, &p) || !(p > 0 && p < 100)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--metric-percentiles must be numbers in (0, 100) separated by commas, got '", s, "'"));
    }
    out.push_back(p);
  }
  return out;
}

// vLLM's --goodput KEY:VALUE pairs, the values in ms.
absl::StatusOr<loadgen::Slo> ParseGoodput(const std::vector<std::string>& items) {
  loadgen::Slo slo;
  for (const std::string& item : items) {
    const std::vector<std::string> kv = absl::StrSplit(item, ':');
    double ms = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &ms) || !(ms > 0) || std::isinf(ms)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--goodput takes ttft:MS, tpot:MS or e2el:MS with MS > 0, got '", item, "'"));
    }
    if (kv[0] == "ttft") {
      slo.ttft_ms = ms;
    } else if (kv[0] == "tpot") {
      slo.tpot_ms = ms;
    } else if (kv[0] == "e2el") {
      slo.e2el_ms = ms;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: unknown metric '", kv[0], "' (ttft, tpot or e2el)"));
    }
  }
  return slo;
}

absl::Status Run(const BenchServeOptions& o) {
  loadgen::ServeBenchmarkOptions b;
  b.server.base_url =
      o.base_url.empty() ? absl::StrCat("http://", o.host, ":", o.port) : o.base_url;
  b.server.api_key = o.api_key;
  if (b.server.api_key.empty() && getenv("OPENAI_API_KEY") != nullptr) {
    b.server.api_key = getenv("OPENAI_API_KEY");
  }
  b.server.timeout_s = o.timeout_s;
  b.model = o.model;
  b.endpoint =
      o.backend == "openai-chat" ? loadgen::ApiEndpoint::kChat : loadgen::ApiEndpoint::kCompletions;
  b.num_prompts = o.num_prompts;
  b.input_len = o.random_input_len;
  b.output_len = o.random_output_len;
  b.range_ratio = o.random_range_ratio;
  b.prefix_len = o.random_prefix_len;
  b.dataset_name = o.dataset_name;
  b.dataset_path = o.dataset_path;
  b.sharegpt_output_len = o.sharegpt_output_len;
  TANDEM_ASSIGN_OR_RETURN(b.request_rate, ParseRate(o.request_rate));
  b.burstiness = o.burstiness;
  b.max_concurrency = o.max_concurrency;
  b.seed = o.seed;
  b.ignore_eos = o.ignore_eos;
  TANDEM_ASSIGN_OR_RETURN(b.summary.percentiles, ParsePercentiles(o.metric_percentiles));
  TANDEM_ASSIGN_OR_RETURN(b.summary.goodput, ParseGoodput(o.goodput));
  if (!o.json) {
    b.progress = [](const std::string& s) {
      std::fprintf(stderr, "tandem bench serve: %s\n", s.c_str());
    };
  }
  TANDEM_ASSIGN_OR_RETURN(nlohmann::ordered_json result, loadgen::RunServeBenchmark(b));
  const std::string json_text =
      result.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  if (o.json) {
    std::printf("%s\n", json_text.c_str());
  } else {
    std::printf("%s", loadgen::FormatSummary(result, b.summary.percentiles).c_str());
    for (const auto& e : result["errors"]) {
      std::fprintf(stderr, "tandem bench serve: a request failed: %s\n",
                   e.get<std::string>().c_str());
    }
  }
  // vLLM's --save-result writes to --result-dir / --result-filename, the
  // name by default from the backend, the rate, the model and the time.
  std::string file = o.result_filename;
  if (o.save_result && file.empty()) {
    std::string model = result["model"].get<std::string>();
    model = model.substr(model.find_last_of('/') + 1);
    file = absl::StrCat(o.backend, "-", o.request_rate, "qps-", model, "-",
                        absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()),
                        ".json");
  }
  if (!file.empty()) {
    if (!o.result_dir.empty() && file.front() != '/') file = o.result_dir + "/" + file;
    std::ofstream f(file, std::ios::trunc);
    f << json_text << "\n";
    if (!f.good()) {
      return absl::PermissionDeniedError(
          absl::StrCat("the result file ", file, ": cannot write it"));
    }
    if (!o.json) std::fprintf(stderr, "tandem bench serve: result written to %s\n", file.c_str());
  }
  if (result["completed"].get<int64_t>() == 0) {
    return absl::UnavailableError("no request completed");
  }
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddBenchServeCommand(CLI::App& bench, BenchServeOptions& o) {
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "Load-test a running OpenAI-compatible server as `vllm bench serve` does: random "
      "prompts at a request rate, TTFT/TPOT/ITL/E2EL and throughput");
  cmd->add_option("--base-url", o.base_url,
                  "The server, e.g. http://127.0.0.1:8000 (default: --host and --port)");
  cmd->add_option("--host", o.host, "The server's host")->capture_default_str();
  cmd->add_option("--port", o.port, "The server's port")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--backend", o.backend,
                  "openai (/v1/completions, prompts as token ids) or openai-chat "
                  "(/v1/chat/completions)")
      ->capture_default_str()
      ->check(CLI::IsMember({"openai", "openai-chat"}));
  cmd->add_option("--model", o.model, "The model to ask for (default: the first /v1/models lists)");
  cmd->add_option("--dataset-name", o.dataset_name,
                  "random (--random-*) or sharegpt (a ShareGPT JSON file at --dataset-path)")
      ->capture_default_str()
      ->check(CLI::IsMember({"random", "sharegpt"}));
  cmd->add_option("--dataset-path", o.dataset_path, "The ShareGPT JSON file");
  cmd->add_option("--sharegpt-output-len", o.sharegpt_output_len,
                  "Tokens to generate per ShareGPT request (default: the reply's length)")
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--num-prompts", o.num_prompts, "Requests to send")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--random-input-len", o.random_input_len, "Prompt tokens per request")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--random-output-len", o.random_output_len, "Tokens to generate per request")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--random-range-ratio", o.random_range_ratio,
                  "Lengths drawn uniformly from [len (1 - r), len (1 + r)]")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--random-prefix-len", o.random_prefix_len,
                  "Tokens of one random opening every prompt starts with, before its own "
                  "--random-input-len (a shared system prompt: what prefix caching serves)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000000));
  cmd->add_option("--request-rate", o.request_rate,
                  "Requests per second (Poisson arrivals at --burstiness 1), or inf: all at once")
      ->capture_default_str();
  cmd->add_option("--burstiness", o.burstiness,
                  "Shape of the gamma-distributed gaps: 1 Poisson, < 1 burstier, > 1 steadier")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o.max_concurrency, "Requests in flight at most (0: any)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--seed", o.seed, "Seed of the prompts and the arrivals")->capture_default_str();
  cmd->add_flag("--ignore-eos", o.ignore_eos,
                "Ask the server to ignore EOS, so that every answer has its output length");
  cmd->add_option("--metric-percentiles", o.metric_percentiles,
                  "Percentiles to report, comma-separated")
      ->capture_default_str();
  cmd->add_option("--goodput", o.goodput,
                  "SLOs for goodput in ms, e.g. --goodput ttft:500 tpot:50 (ttft, tpot, e2el)");
  cmd->add_option("--api-key", o.api_key,
                  "Sent as Authorization: Bearer (default: $OPENAI_API_KEY)");
  cmd->add_option("--timeout", o.timeout_s, "Seconds a request may take")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_flag("--json", o.json, "Print the result as JSON (vLLM's field names)");
  cmd->add_flag("--save-result", o.save_result,
                "Also write the JSON result to a file (vLLM's flag; named by --result-filename "
                "or from the backend, rate, model and time)");
  cmd->add_option("--result-dir", o.result_dir, "The directory of the result file");
  cmd->add_option("--result-filename", o.result_filename, "Also write the JSON result here");
  return cmd;
}

int RunBenchServe(const BenchServeOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    PrintCommandError("tandem bench serve", s);
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
