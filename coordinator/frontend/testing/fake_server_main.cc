// A stand-alone OpenAI-compatible server over the fake backend and the fake
// byte-level tokenizer, for API conformance checks with real clients
// (tests/openai_client_check.py). Usage:
//   tandem_fake_openai_server [--port N] [--api-key KEY] [--step-ms MS]
//                             [--model NAME] [--reply TEXT]
//                             [--reasoning-parser qwen3|deepseek_r1]
//                             [--tool-call-parser hermes]
// Prints "listening on 127.0.0.1:PORT" and serves until SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "coordinator/frontend/http_server.h"
#include "coordinator/frontend/testing/fake_backend.h"
#include "coordinator/frontend/testing/fake_text_processor.h"

int main(int argc, char** argv) {
  using namespace tandem::frontend;
  HttpServerOptions options;
  options.port = 0;
  options.parse.served_model_names = {"fake-model"};
  testing::FakeBackend::Options backend_options;
  backend_options.step = std::chrono::milliseconds(5);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    std::string value = argv[i + 1];
    if (flag == "--port") {
      options.port = std::atoi(value.c_str());
    } else if (flag == "--api-key") {
      options.api_key = value;
    } else if (flag == "--step-ms") {
      backend_options.step =
          std::chrono::milliseconds(std::atoi(value.c_str()));
    } else if (flag == "--model") {
      options.parse.served_model_names = {value};
    } else if (flag == "--reply") {
      backend_options.reply = value;
    } else if (flag == "--reasoning-parser" || flag == "--tool-call-parser") {
      absl::Status s;
      if (flag == "--reasoning-parser") {
        auto p = ParseReasoningParser(value);
        s = p.status();
        if (p.ok()) options.parse.reasoning_parser = *p;
      } else {
        auto p = ParseToolCallParser(value);
        s = p.status();
        if (p.ok()) options.parse.tool_call_parser = *p;
      }
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts

  testing::FakeBackend backend(backend_options);
  testing::FakeTextProcessor text;
  auto server = HttpServer::Create(options, &backend, &text);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  absl::Status started = (*server)->Start();
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s:%d\n", options.host.c_str(), (*server)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  (*server)->Stop(std::chrono::seconds(2));
  return 0;
}
