#include "coordinator/loadgen/serve_benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/loadgen/arrival_schedule.h"
#include "coordinator/loadgen/datasets.h"
#include "coordinator/loadgen/server_exchange.h"

namespace tandem::loadgen {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Requests in flight at most without --max-concurrency (one thread each).
constexpr int kMaxInFlight = 1024;

absl::StatusOr<std::string> FirstModel(const ServerAddress& server) {
  TANDEM_ASSIGN_OR_RETURN(json models, Exchange(server, "/v1/models", nullptr));
  if (!models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
      !models["data"][0].contains("id") || !models["data"][0]["id"].is_string()) {
    return absl::FailedPreconditionError("/v1/models lists no model; give --model");
  }
  return models["data"][0]["id"].get<std::string>();
}

}  // namespace

absl::StatusOr<nlohmann::ordered_json> RunServeBenchmark(const ServeBenchmarkOptions& options) {
  ServeBenchmarkOptions o = options;
  if (o.max_concurrency < 0) {
    return absl::InvalidArgumentError("--max-concurrency must be >= 0");
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> arrivals,
                          ArrivalTimes(o.num_prompts, o.request_rate, o.burstiness, o.seed));
  if (o.model.empty()) {
    TANDEM_ASSIGN_OR_RETURN(o.model, FirstModel(o.server));
  }
  if (o.progress) {
    o.progress(absl::StrCat("building ", o.num_prompts, " prompts (", o.dataset_name, ")"));
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<DatasetPrompt> dataset, MakeDataset(o));

  const bool chat = o.endpoint == ApiEndpoint::kChat;
  std::vector<json> bodies;
  bodies.reserve(dataset.size());
  for (const DatasetPrompt& p : dataset) {
    json body = {{"model", o.model}, {"temperature", 0}, {"ignore_eos", o.ignore_eos}};
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", p.prompt}}});
      body["max_completion_tokens"] = p.output_len;
    } else {
      body["prompt"] = p.prompt;
      body["max_tokens"] = p.output_len;
    }
    bodies.push_back(std::move(body));
  }

  // Requests join a queue at their arrival times; `workers` threads take
  // them in order, so that at most that many are in flight (vLLM's
  // semaphore) and a thread is never made per request.
  std::vector<RequestRecord> records(dataset.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t arrived = 0, taken = 0;
  const int workers =
      std::min(o.max_concurrency > 0 ? o.max_concurrency : kMaxInFlight, o.num_prompts);
  if (o.progress) o.progress(absl::StrCat("sending ", o.num_prompts, " requests"));
  const Clock::time_point start = Clock::now();
  Clock::time_point end = start;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      while (true) {
        size_t i;
        {
          std::unique_lock<std::mutex> l(mu);
          cv.wait(l, [&] { return taken < arrived || taken == bodies.size(); });
          if (taken == bodies.size()) return;
          i = taken++;
          if (taken == bodies.size()) cv.notify_all();  // the idle workers may go
        }
        RequestRecord r =
            RunStreamingRequest(o.server, o.endpoint, bodies[i], dataset[i].input_len);
        std::lock_guard<std::mutex> l(mu);
        records[i] = std::move(r);
        end = std::max(end, Clock::now());
      }
    });
  }
  for (size_t i = 0; i < bodies.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(arrivals[i])));
    std::lock_guard<std::mutex> l(mu);
    ++arrived;
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> l(mu);
    cv.notify_all();
  }
  for (std::thread& t : threads) t.join();
  const double duration = std::chrono::duration<double>(end - start).count();

  nlohmann::ordered_json out;
  out["model"] = o.model;
  out["endpoint"] = chat ? "/v1/chat/completions" : "/v1/completions";
  out["dataset_name"] = o.dataset_name;
  out["num_prompts"] = o.num_prompts;
  out["random_input_len"] = o.input_len;
  out["random_output_len"] = o.output_len;
  out["random_range_ratio"] = o.range_ratio;
  out["request_rate"] = std::isinf(o.request_rate) ? json("inf") : json(o.request_rate);
  out["burstiness"] = o.burstiness;
  out["max_concurrency"] = o.max_concurrency > 0 ? json(o.max_concurrency) : json(nullptr);
  out.update(Summarize(records, duration, o.summary));
  nlohmann::ordered_json errors = nlohmann::ordered_json::array();
  for (const RequestRecord& r : records) {
    if (!r.ok && errors.size() < 5) errors.push_back(r.error);
  }
  out["errors"] = std::move(errors);  // the first few, to say why requests failed
  return out;
}

}  // namespace tandem::loadgen
