#include "coordinator/frontend/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <exception>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/generation_session.h"
#include "coordinator/frontend/json_fields.h"
#include "coordinator/frontend/response_common.h"
#include "coordinator/frontend/tokenize_endpoints.h"

namespace tandem::frontend {
namespace {

constexpr char kJson[] = "application/json";

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// What the request's headers say of its body, read before the body is:
// none, chunked, expected but not delimited, a length, or a length that is
// not one. httplib reads a body before any handler runs: without these
// checks a length that is not one (a negative one was answered as too
// large) or none at all kept the client waiting out the read timeout.
enum class DeclaredBody { kNone, kChunked, kUndelimited, kLength, kInvalid };
DeclaredBody DeclaredBodyOf(const httplib::Request& req, uint64_t* length) {
  if (absl::EqualsIgnoreCase(req.get_header_value("Transfer-Encoding"),
                             "chunked")) {
    return DeclaredBody::kChunked;
  }
  if (!req.has_header("Content-Length")) {
    // httplib reads the body of these methods up to the end of the
    // connection when no length is declared: an HTTP/1.1 client that
    // keeps its connection open would wait out the read timeout.
    const bool body_expected =
        req.method == "POST" || req.method == "PUT" ||
        req.method == "PATCH" || req.method == "DELETE" ||
        req.method == "PRI";
    return body_expected ? DeclaredBody::kUndelimited : DeclaredBody::kNone;
  }
  if (req.get_header_value_count("Content-Length") != 1)
    return DeclaredBody::kInvalid;
  const std::string v = req.get_header_value("Content-Length");
  // At most 18 digits: no overflow, and far past any limit.
  if (v.empty() || v.size() > 18) return DeclaredBody::kInvalid;
  uint64_t n = 0;
  for (char ch : v) {
    if (ch < '0' || ch > '9') return DeclaredBody::kInvalid;
    n = n * 10 + static_cast<uint64_t>(ch - '0');
  }
  *length = n;
  return DeclaredBody::kLength;
}

std::string EndpointLabel(const std::string& path) {
  static const char* const kKnown[] = {"/v1/completions", "/v1/chat/completions",
                                       "/v1/models",      "/health",
                                       "/ping",           "/ready",
                                       "/version",        "/metrics",
                                       "/tokenize",       "/detokenize",
                                       "/apply-template"};
  for (const char* k : kKnown) {
    if (path == k) return k;
  }
  if (absl::StartsWith(path, "/v1/models/")) return "/v1/models/{id}";
  return "other";
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Runs a handler; anything it throws becomes a 500 (never reaches httplib).
httplib::Server::Handler Guarded(
    std::function<void(const httplib::Request&, httplib::Response&)> f) {
  return [f = std::move(f)](const httplib::Request& req,
                            httplib::Response& res) {
    try {
      f(req, res);
    } catch (...) {
      res.status = 500;
      res.set_content(
          ErrorBody(ToApiError(absl::InternalError("internal error"))), kJson);
    }
  };
}

}  // namespace

// One admitted generation request; releases its admission slot when dropped.
class HttpServer::Slot {
 public:
  explicit Slot(HttpServer* s) : s_(s) {}
  ~Slot() { s_->metrics_->SetHttpInFlight(--s_->in_flight_); }

 private:
  HttpServer* s_;
};

HttpServer::HttpServer(HttpServerOptions options, GenerationBackend* backend,
                       const TextProcessor* text, Metrics* metrics)
    : options_(std::move(options)),
      backend_(backend),
      text_(text),
      metrics_(metrics) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(
    HttpServerOptions options, GenerationBackend* backend,
    const TextProcessor* text, Metrics* metrics) {
  if (backend == nullptr || text == nullptr) {
    return absl::InvalidArgumentError(
        "HttpServer needs a backend and a text processor");
  }
  if (options.parse.served_model_names.empty()) {
    return absl::InvalidArgumentError(
        "HttpServer needs at least one served model name");
  }
  if (options.parse.max_context <= 0)
    options.parse.max_context = backend->max_context();
  if (options.parse.vocab_size <= 0)
    options.parse.vocab_size = text->vocab_size();
  if (options.parse.max_context <= 0 || options.parse.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        "max_context and vocab_size must be positive");
  }
  if (options.max_concurrent_requests <= 0) {
    return absl::InvalidArgumentError(
        "max_concurrent_requests must be positive");
  }
  std::unique_ptr<HttpServer> s(
      new HttpServer(std::move(options), backend, text, metrics));
  if (s->metrics_ == nullptr) {
    s->owned_metrics_ =
        std::make_unique<Metrics>(s->options_.parse.served_model_names[0]);
    s->metrics_ = s->owned_metrics_.get();
  }
  s->created_ = UnixNow();
  s->server_ = std::make_unique<httplib::Server>();
  const int threads = s->options_.num_threads > 0
                          ? s->options_.num_threads
                          : s->options_.max_concurrent_requests + 16;
  s->server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  s->server_->set_keep_alive_max_count(s->options_.keep_alive_max_count);
  s->server_->set_keep_alive_timeout(s->options_.keep_alive_timeout_s);
  s->server_->set_read_timeout(s->options_.read_timeout_s, 0);
  s->server_->set_write_timeout(s->options_.write_timeout_s, 0);
  s->server_->set_payload_max_length(s->options_.max_body_bytes);
  HttpServer* raw = s.get();
  s->server_->set_socket_options([raw](socket_t sock) {
    httplib::default_socket_options(sock);
    raw->listen_fd_ = static_cast<int>(sock);
  });
  s->InstallRoutes();
  return s;
}

HttpServer::~HttpServer() { Stop(std::chrono::milliseconds(0)); }

absl::Status HttpServer::Start() {
  if (listen_thread_.joinable())
    return absl::FailedPreconditionError("already started");
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ <= 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot bind ", options_.host, ":0"));
    }
  } else {
    if (!server_->bind_to_port(options_.host, options_.port)) {
      return absl::UnavailableError(
          absl::StrCat("cannot bind ", options_.host, ":", options_.port));
    }
    port_ = options_.port;
  }
  // httplib (0.11, as Debian builds it) listens with a backlog of 5: a
  // burst of new connections while the accept loop waits for a core (a
  // benchmark opening its 256 at once, on a machine whose cores run the
  // model) overflowed it and clients saw their connections reset. Listening
  // again on the bound socket only lengthens its queue (the kernel caps it
  // at net.core.somaxconn).
  if (listen_fd_ >= 0 && ::listen(listen_fd_, SOMAXCONN) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot lengthen the accept queue: errno ", errno));
  }
  listen_thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib 0.11 has no wait_until_ready(): poll is_running().
  for (int i = 0; i < 500 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!server_->is_running())
    return absl::InternalError("HTTP server did not start");
  return absl::OkStatus();
}

void HttpServer::Stop(std::chrono::milliseconds drain) {
  if (stopped_.exchange(true)) return;
  draining_ = true;
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (GenerationSession* s : sessions_) s->Cancel();
  }
  server_->stop();
  if (listen_thread_.joinable()) listen_thread_.join();
}

void HttpServer::Wait() {
  if (listen_thread_.joinable()) listen_thread_.join();
}

void HttpServer::Register(GenerationSession* s) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.insert(s);
}

void HttpServer::Unregister(GenerationSession* s) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.erase(s);
}

std::shared_ptr<HttpServer::Slot> HttpServer::TryAcquireSlot() {
  int64_t n = ++in_flight_;
  if (n > options_.max_concurrent_requests) {
    --in_flight_;
    return nullptr;
  }
  metrics_->SetHttpInFlight(n);
  return std::make_shared<Slot>(this);
}

void HttpServer::SendError(httplib::Response& res, const absl::Status& status) {
  ApiError e = ToApiError(status);
  res.status = e.http_status;
  if (e.http_status == 503) {
    res.set_header("Retry-After", std::to_string(options_.retry_after_s));
  }
  res.set_content(ErrorBody(e), kJson);
}

void HttpServer::SendOverloaded(httplib::Response& res, int http_status,
                                const std::string& message) {
  ApiError e;
  e.http_status = http_status;
  e.message = message;
  e.type = http_status == 429 ? "rate_limit_error" : "server_error";
  e.code = http_status == 429 ? "rate_limit_exceeded" : "overloaded";
  res.status = http_status;
  res.set_header("Retry-After", std::to_string(options_.retry_after_s));
  res.set_content(ErrorBody(e), kJson);
}

void HttpServer::InstallRoutes() {
  httplib::Server& s = *server_;

  s.set_pre_routing_handler([this](const httplib::Request& req,
                                   httplib::Response& res) {
    // A body that cannot be read (a length that is not one, or none where
    // httplib would read up to the end of the connection) is refused at
    // once, from the headers.
    uint64_t length = 0;
    const DeclaredBody body = DeclaredBodyOf(req, &length);
    if (body == DeclaredBody::kInvalid ||
        body == DeclaredBody::kUndelimited) {
      if (body == DeclaredBody::kInvalid) {
        SendError(res, InvalidParam("Content-Length",
                                    "The Content-Length header is not a "
                                    "length.",
                                    "invalid_header"));
      } else {
        SendError(res,
                  InvalidParam("Content-Length",
                               absl::StrCat("A ", req.method,
                                            " request needs a Content-Length "
                                            "header (or Transfer-Encoding: "
                                            "chunked)."),
                               "length_required"));
        res.status = 411;
      }
      // The answer says "Connection: close" (httplib writes it when the
      // request carries it; req is httplib's own, not const). httplib
      // itself keeps the connection until its keep-alive timeout: bytes
      // sent after the headers are read as the next request, which fails
      // and closes it.
      const_cast<httplib::Request&>(req).set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options_.api_key.empty() || !absl::StartsWith(req.path, "/v1/")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    const std::string expected = "Bearer " + options_.api_key;
    if (ConstantTimeEquals(auth, expected))
      return httplib::Server::HandlerResponse::Unhandled;
    SendError(
        res,
        WithCode(
            absl::UnauthenticatedError(
                "Invalid or missing API key (Authorization: Bearer <key>)."),
            "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });

  // A client that asks before sending its body (Expect: 100-continue, as
  // curl does for large bodies) and declares more than the limit is told
  // 413 instead of 100, and sends nothing. Without the Expect header httplib
  // reads and drops the body, then answers 413 (the error handler below):
  // a client that writes its whole body before reading gets the answer
  // either way.
  s.set_expect_100_continue_handler([this](const httplib::Request& req,
                                           httplib::Response& res) {
    uint64_t length = 0;
    if (DeclaredBodyOf(req, &length) == DeclaredBody::kLength &&
        length > options_.max_body_bytes) {
      SendError(res, InvalidParam(
                         "body",
                         absl::StrCat("The request body is too large (",
                                      length, " bytes; at most ",
                                      options_.max_body_bytes, ")."),
                         "too_large"));
      res.status = 413;
      // httplib writes this answer without the length it adds to routed
      // ones; without it a client reads to the end of the connection.
      res.set_header("Content-Length", std::to_string(res.body.size()));
      const_cast<httplib::Request&>(req).set_header("Connection", "close");
      return 413;
    }
    return 100;
  });

  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_)
          return httplib::Server::HandlerResponse::Unhandled;
        absl::Status st =
            res.status == 404
                ? WithCode(absl::NotFoundError(absl::StrCat(
                               "Not found: ", req.method, " ", req.path)),
                           "not_found")
            : res.status == 413
                ? InvalidParam("body", "The request body is too large.",
                               "too_large")
                : absl::InvalidArgumentError(
                      absl::StrCat("HTTP error ", res.status));
        ApiError e = ToApiError(st);
        res.set_content(ErrorBody(e), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));

  s.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                             std::exception_ptr) {
    res.status = 500;
    res.set_content(
        ErrorBody(ToApiError(absl::InternalError("internal error"))), kJson);
  });

  // Runs just before the status line is written (so a client that has its
  // answer sees it counted).
  s.set_post_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) {
        try {
          metrics_->CountHttpRequest(EndpointLabel(req.path), res.status);
        } catch (...) {
        }
      });

  auto ok_json = [](httplib::Response& res, const std::string& body) {
    res.status = 200;
    res.set_content(body, kJson);
  };
  s.Get("/health",
        Guarded([ok_json](const httplib::Request&, httplib::Response& res) {
          ok_json(res, R"({"status":"ok"})");
        }));
  s.Get("/ping",
        Guarded([ok_json](const httplib::Request&, httplib::Response& res) {
          ok_json(res, R"({"status":"ok"})");
        }));
  s.Get(
      "/ready",
      Guarded([this, ok_json](const httplib::Request&, httplib::Response& res) {
        if (backend_->Ready() && !draining_) {
          ok_json(res, R"({"status":"ready"})");
        } else {
          res.status = 503;
          res.set_header("Retry-After", std::to_string(options_.retry_after_s));
          res.set_content(draining_ ? R"({"status":"draining"})"
                                    : R"({"status":"loading"})",
                          kJson);
        }
      }));
  s.Get("/version", Guarded([this, ok_json](const httplib::Request&,
                                            httplib::Response& res) {
          ojson v;
          v["version"] = options_.version;
          ok_json(res, DumpJson(v));
        }));
  s.Get("/metrics",
        Guarded([this](const httplib::Request&, httplib::Response& res) {
          res.status = 200;
          res.set_content(metrics_->Serialize(),
                          "text/plain; version=0.0.4; charset=utf-8");
        }));
  s.Get("/v1/models",
        Guarded([this](const httplib::Request& req, httplib::Response& res) {
          HandleModels(req, res);
        }));
  s.Get(R"(/v1/models/(.+))",
        Guarded([this](const httplib::Request& req, httplib::Response& res) {
          HandleModel(req, res);
        }));
  s.Post("/tokenize", Guarded([this](const httplib::Request& req, httplib::Response& res) {
           HandleTokenize(req, res, TextRoute::kTokenize);
         }));
  s.Post("/detokenize", Guarded([this](const httplib::Request& req, httplib::Response& res) {
           HandleTokenize(req, res, TextRoute::kDetokenize);
         }));
  s.Post("/apply-template", Guarded([this](const httplib::Request& req, httplib::Response& res) {
           HandleTokenize(req, res, TextRoute::kApplyTemplate);
         }));
  s.Post("/v1/completions",
         Guarded([this](const httplib::Request& req, httplib::Response& res) {
           HandleGeneration(req, res, Endpoint::kCompletions);
         }));
  s.Post("/v1/chat/completions",
         Guarded([this](const httplib::Request& req, httplib::Response& res) {
           HandleGeneration(req, res, Endpoint::kChat);
         }));
}

namespace {
ojson ModelCard(const std::string& name, int64_t created,
                const std::string& owner, int64_t max_context) {
  ojson m;
  m["id"] = name;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = owner;
  m["root"] = name;
  m["max_model_len"] = max_context;
  return m;
}
}  // namespace

void HttpServer::HandleModels(const httplib::Request&, httplib::Response& res) {
  ojson data = ojson::array();
  for (const std::string& name : options_.parse.served_model_names) {
    data.push_back(ModelCard(name, created_, options_.owned_by,
                             options_.parse.max_context));
  }
  ojson body;
  body["object"] = "list";
  body["data"] = std::move(data);
  res.status = 200;
  res.set_content(DumpJson(body), kJson);
}

void HttpServer::HandleModel(const httplib::Request& req,
                             httplib::Response& res) {
  const std::string id =
      req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  for (const std::string& name : options_.parse.served_model_names) {
    if (name == id) {
      res.status = 200;
      res.set_content(DumpJson(ModelCard(name, created_, options_.owned_by,
                                         options_.parse.max_context)),
                      kJson);
      return;
    }
  }
  SendError(res, ModelNotFound(id));
}

void HttpServer::HandleTokenize(const httplib::Request& req, httplib::Response& res,
                                TextRoute route) {
  auto body = ParseRequestBody(req.body);
  if (!body.ok()) return SendError(res, body.status());
  auto answer = route == TextRoute::kTokenize ? TokenizeResponse(*body, options_.parse, *text_)
                : route == TextRoute::kDetokenize
                    ? DetokenizeResponse(*body, options_.parse, *text_)
                    : ApplyTemplateResponse(*body, options_.parse, *text_);
  if (!answer.ok()) return SendError(res, answer.status());
  res.status = 200;
  res.set_content(*std::move(answer), kJson);
}

void HttpServer::HandleGeneration(const httplib::Request& req,
                                  httplib::Response& res, Endpoint endpoint) {
  const Clock::time_point arrival = Clock::now();
  if (draining_) {
    SendOverloaded(res, 503, "The server is shutting down.");
    return;
  }
  if (!backend_->Ready()) {
    SendOverloaded(res, 503, "The model is not ready yet.");
    return;
  }
  std::shared_ptr<Slot> slot = TryAcquireSlot();
  if (slot == nullptr) {
    SendOverloaded(
        res, 429,
        absl::StrCat("Too many concurrent requests (limit ",
                     options_.max_concurrent_requests, "); retry later."));
    return;
  }

  auto body = ParseRequestBody(req.body);
  if (!body.ok()) return SendError(res, body.status());
  auto parsed = endpoint == Endpoint::kChat
                    ? ParseChatRequest(*body, options_.parse, *text_, req.body)
                    : ParseCompletionRequest(*body, options_.parse, *text_, req.body);
  if (!parsed.ok()) return SendError(res, parsed.status());
  const bool stream = parsed->stream;

  SessionEnv env{backend_, text_, metrics_, options_.poll_interval};
  auto started = GenerationSession::Start(
      std::move(*parsed), NewResponseId(endpoint), UnixNow(), arrival, env);
  if (!started.ok()) return SendError(res, started.status());
  std::shared_ptr<GenerationSession> session = std::move(*started);
  Register(session.get());

  if (!stream) {
    auto result = session->Complete();
    Unregister(session.get());
    if (!result.ok()) {
      if (draining_ && result.status().code() == absl::StatusCode::kCancelled) {
        return SendOverloaded(res, 503, "The server is shutting down.");
      }
      return SendError(res, result.status());
    }
    res.status = 200;
    res.set_content(*result, kJson);
    return;
  }

  // The provider runs on this connection's thread after the headers are
  // sent; the state keeps the session and the admission slot alive until
  // httplib drops the provider.
  struct StreamState {
    StreamState(HttpServer* srv, std::shared_ptr<GenerationSession> s,
                std::shared_ptr<Slot> sl)
        : server(srv), session(std::move(s)), slot(std::move(sl)) {}
    StreamState(const StreamState&) = delete;
    StreamState& operator=(const StreamState&) = delete;
    ~StreamState() { server->Unregister(session.get()); }
    HttpServer* server;
    std::shared_ptr<GenerationSession> session;
    std::shared_ptr<Slot> slot;
  };
  auto state = std::make_shared<StreamState>(this, session, std::move(slot));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        bool ok = false;
        try {
          ok = state->session->Stream(
              [&sink](const std::string& s) {
                return sink.write(s.data(), s.size());
              },
              [&sink] { return sink.is_writable(); });
        } catch (...) {
          ok = false;
        }
        if (!ok) {
          state->session->Cancel();
          return false;
        }
        sink.done();
        return true;
      },
      [state](bool success) {
        if (!success) state->session->Cancel();
      });
}

}  // namespace tandem::frontend
