// Helpers for the loopback server tests: a server over the fake backend on an
// ephemeral port, and SSE parsing.
#ifndef TANDEM_COORDINATOR_FRONTEND_TESTING_SERVER_TEST_UTIL_H_
#define TANDEM_COORDINATOR_FRONTEND_TESTING_SERVER_TEST_UTIL_H_

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/frontend/http_server.h"
#include "coordinator/frontend/testing/fake_backend.h"
#include "coordinator/frontend/testing/fake_text_processor.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend::testing {

struct TestServer {
  std::unique_ptr<FakeBackend> backend;
  FakeTextProcessor text;
  std::unique_ptr<HttpServer> server;

  // Starts on 127.0.0.1:<ephemeral>; model name "fake". Returns false (and
  // prints why) on failure.
  bool Start(HttpServerOptions options = {},
             FakeBackend::Options backend_options = {}) {
    backend = std::make_unique<FakeBackend>(backend_options);
    options.host = "127.0.0.1";
    options.port = 0;
    if (options.parse.served_model_names.empty())
      options.parse.served_model_names = {"fake"};
    options.keep_alive_timeout_s = 1;
    options.poll_interval = std::chrono::milliseconds(20);
    auto s = HttpServer::Create(options, backend.get(), &text);
    if (!s.ok()) {
      fprintf(stderr, "Create: %s\n", s.status().ToString().c_str());
      return false;
    }
    server = std::move(*s);
    absl::Status started = server->Start();
    if (!started.ok()) {
      fprintf(stderr, "Start: %s\n", started.ToString().c_str());
      return false;
    }
    return true;
  }
  ~TestServer() {
    if (server) server->Stop(std::chrono::milliseconds(0));
  }
  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    c->set_read_timeout(20, 0);
    c->set_write_timeout(20, 0);
    return c;
  }
};

// The payloads of "data: …\n\n" events; `ok` false if the framing is off.
inline std::vector<std::string> SseData(const std::string& body, bool* ok) {
  std::vector<std::string> out;
  *ok = true;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos || body.compare(pos, 6, "data: ") != 0) {
      *ok = false;
      break;
    }
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

inline nlohmann::json Json(const std::string& s) {
  return nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
}

}  // namespace tandem::frontend::testing

#endif  // TANDEM_COORDINATOR_FRONTEND_TESTING_SERVER_TEST_UTIL_H_
