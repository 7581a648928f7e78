// The coordinator's OpenAI-compatible HTTP server (cpp-httplib):
//   GET  /v1/models, /v1/models/{id}
//   POST /v1/completions, /v1/chat/completions  (JSON or SSE with "stream")
//   GET  /health, /ping  200 while the process lives (liveness)
//   GET  /ready          200 once backend->Ready(), else 503 (readiness)
//   GET  /version        {"version": …}
//   GET  /metrics        Prometheus text format
// With an API key, /v1/* needs "Authorization: Bearer <key>" (else 401).
// Admission: at most max_concurrent_requests generation requests at a time;
// beyond that 429 + Retry-After. Backend overload (kResourceExhausted /
// kUnavailable), a backend that is not ready, or a draining server: 503 +
// Retry-After. A client that disconnects mid-stream cancels its requests.
// Handlers never throw: errors are OpenAI-style JSON bodies.
#ifndef TANDEM_COORDINATOR_FRONTEND_HTTP_SERVER_H_
#define TANDEM_COORDINATOR_FRONTEND_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/version.h"
#include "coordinator/frontend/generation_backend.h"
#include "coordinator/frontend/metrics.h"
#include "coordinator/frontend/request_parser.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tandem::frontend {

class GenerationSession;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: an ephemeral port (see HttpServer::port())
  // The first is the default when a request names no model; max_context,
  // vocab_size come from the backend / text processor when left 0.
  ParseOptions parse;
  std::string api_key;  // empty: no authentication
  int max_concurrent_requests = 256;
  int retry_after_s = 1;
  // httplib worker threads (each connection, streaming or kept alive, holds
  // one): 0 = max_concurrent_requests + 16.
  int num_threads = 0;
  size_t max_body_bytes = 32u << 20;
  int keep_alive_max_count = 1000;
  int keep_alive_timeout_s = 5;
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  std::chrono::milliseconds poll_interval{50};  // disconnect checks while idle
  std::string version = kVersion;
  std::string owned_by = "tandem";
};

class HttpServer {
 public:
  // `backend` and `text` must outlive the server. `metrics` may be null (the
  // server then owns one, see metrics()).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(
      HttpServerOptions options, GenerationBackend* backend,
      const TextProcessor* text, Metrics* metrics = nullptr);
  ~HttpServer();  // Stop(0)
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and serves on a background thread; returns once listening.
  absl::Status Start();
  // The bound port (after Start).
  int port() const { return port_; }
  // Graceful stop: refuse new generation requests (503), wait up to `drain`
  // for those in flight, cancel the rest, then close. Idempotent.
  void Stop(std::chrono::milliseconds drain = std::chrono::seconds(5));
  // Blocks until the server stops.
  void Wait();

  Metrics& metrics() { return *metrics_; }
  int64_t in_flight() const { return in_flight_.load(); }

 private:
  class Slot;
  HttpServer(HttpServerOptions options, GenerationBackend* backend,
             const TextProcessor* text, Metrics* metrics);
  void InstallRoutes();
  // POST /tokenize, /detokenize and /apply-template (tokenize_endpoints.h).
  enum class TextRoute { kTokenize, kDetokenize, kApplyTemplate };
  void HandleTokenize(const httplib::Request& req, httplib::Response& res, TextRoute route);
  void HandleGeneration(const httplib::Request& req, httplib::Response& res,
                        Endpoint endpoint);
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleModel(const httplib::Request& req, httplib::Response& res);
  void SendError(httplib::Response& res, const absl::Status& status);
  void SendOverloaded(httplib::Response& res, int http_status,
                      const std::string& message);
  std::shared_ptr<Slot> TryAcquireSlot();
  void Register(GenerationSession* s);
  void Unregister(GenerationSession* s);

  HttpServerOptions options_;
  GenerationBackend* backend_;
  const TextProcessor* text_;
  std::unique_ptr<Metrics> owned_metrics_;
  Metrics* metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listen_thread_;
  int port_ = 0;
  // The socket httplib last created to bind (its socket-options hook
  // records it), so that Start can lengthen its accept queue.
  int listen_fd_ = -1;
  int64_t created_ = 0;  // unix seconds at Create, for /v1/models

  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopped_{false};
  std::mutex sessions_mu_;
  std::set<GenerationSession*> sessions_;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_HTTP_SERVER_H_
