// Loopback tests of the HTTP server with the fake backend and tokenizer:
// routes, both endpoints streaming and not, SSE framing, auth, admission
// (429), overload (503), disconnect -> cancellation, graceful stop.
#include "coordinator/frontend/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "coordinator/frontend/testing/server_test_util.h"

namespace tandem::frontend {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::FakeBackend;
using testing::Json;
using testing::SseData;
using testing::TestServer;

constexpr char kJsonType[] = "application/json";

std::string ChatBody(const std::string& extra = "") {
  std::string b =
      R"({"model":"fake","messages":[{"role":"user","content":"Hi"}])";
  if (!extra.empty()) b += "," + extra;
  return b + "}";
}

void ExpectError(const httplib::Result& r, int status,
                 const std::string& param = "") {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), kJsonType);
  json j = Json(r->body);
  ASSERT_TRUE(j.is_object()) << r->body;
  ASSERT_TRUE(j["error"].is_object()) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  if (!param.empty()) EXPECT_EQ(j["error"]["param"], param) << r->body;
}

TEST(FrontendServerTest, HealthReadyVersionModels) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  auto c = ts.Client();
  auto health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(c->Get("/ping")->status, 200);
  EXPECT_EQ(c->Get("/ready")->status, 200);
  auto version = c->Get("/version");
  EXPECT_EQ(Json(version->body)["version"], "0.1.0");
  auto models = c->Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  json m = Json(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "fake");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_TRUE(m["data"][0]["created"].is_number_integer());
  EXPECT_EQ(m["data"][0]["owned_by"], "tandem");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  EXPECT_EQ(c->Get("/v1/models/fake")->status, 200);
  ExpectError(c->Get("/v1/models/other"), 404, "model");
  ExpectError(c->Get("/no/such/route"), 404);
  ExpectError(c->Get("/v1/completions"), 404);  // wrong method
}

TEST(FrontendServerTest, NotReadyBackend) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  ts.backend->set_ready(false);
  auto c = ts.Client();
  EXPECT_EQ(c->Get("/health")->status, 200);  // liveness only
  auto ready = c->Get("/ready");
  EXPECT_EQ(ready->status, 503);
  auto r = c->Post("/v1/completions", R"({"prompt":"x"})", kJsonType);
  ExpectError(r, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
}

TEST(FrontendServerTest, UsageGivesCachedTokensWhenTheBackendCachesPrefixes) {
  for (const int64_t cached : {-1, 0, 2}) {
    SCOPED_TRACE(cached);
    TestServer ts;
    FakeBackend::Options bo;
    bo.cached_prompt_tokens = cached;
    ASSERT_TRUE(ts.Start({}, bo));
    auto c = ts.Client();
    // Two choices: their cached tokens add up, as their prompt tokens do.
    auto r = c->Post("/v1/completions", R"({"model":"fake","prompt":["Hi","Yo"],"max_tokens":2})",
                     kJsonType);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    json u = Json(r->body)["usage"];
    EXPECT_EQ(u["prompt_tokens"], 6);
    if (cached < 0) {
      EXPECT_FALSE(u.contains("prompt_tokens_details")) << u.dump();
    } else {
      EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 2 * cached) << u.dump();
    }
    // And in the last chunk of a stream that asks for usage.
    r = c->Post("/v1/chat/completions",
                R"({"model":"fake","messages":[{"role":"user","content":"Hi"}],"max_tokens":2,)"
                R"("stream":true,"stream_options":{"include_usage":true}})",
                kJsonType);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const size_t at = r->body.rfind("\"usage\":{");
    ASSERT_NE(at, std::string::npos) << r->body;
    EXPECT_EQ(r->body.find("cached_tokens", at) != std::string::npos, cached >= 0) << r->body;
  }
}

TEST(FrontendServerTest, CompletionNonStreaming) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  auto c = ts.Client();
  auto r = c->Post("/v1/completions",
                   R"({"model":"fake","prompt":"Hi","max_tokens":5,"seed":1})",
                   kJsonType);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), kJsonType);
  json j = Json(r->body);
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake");
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  auto sent = ts.backend->last_submitted();
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->sampling.max_tokens, 5);
  EXPECT_EQ(sent->sampling.seed, 1u);
  for (int i = 0; i < 100 && ts.backend->active() > 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(ts.backend->active(), 0u);
}

TEST(FrontendServerTest, CompletionBatchOfPrompts) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  auto r = ts.Client()->Post(
      "/v1/completions", R"({"prompt":[[1,2],[3]],"max_tokens":2})", kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = Json(r->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "He");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
}

TEST(FrontendServerTest, ChatNonStreamingStopsAtEos) {
  TestServer ts;
  FakeBackend::Options bo;
  bo.reply = "Yes.";
  ASSERT_TRUE(ts.Start({}, bo));
  auto r = ts.Client()->Post("/v1/chat/completions",
                             ChatBody(R"("logprobs":true)"), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = Json(r->body);
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Yes.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], 257);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 5u);  // 4 + <eos>
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
}

// --reasoning-parser qwen3: the answer's <think> part goes to
// reasoning_content, whole and streamed; /v1/completions is left alone.
TEST(FrontendServerTest, ReasoningParserSplitsChatAnswers) {
  TestServer ts;
  HttpServerOptions so;
  so.parse.reasoning_parser = ReasoningParser::kQwen3;
  FakeBackend::Options bo;
  bo.reply = "<think>\nmull it over\n</think>\n\nYes.";
  ASSERT_TRUE(ts.Start(so, bo));
  auto r = ts.Client()->Post("/v1/chat/completions", ChatBody(), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  json message = Json(r->body)["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "\nmull it over\n");
  EXPECT_EQ(message["content"], "\n\nYes.");

  r = ts.Client()->Post("/v1/chat/completions", ChatBody(R"("stream":true,"logprobs":true)"),
                        kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string reasoning, content;
  size_t logprob_entries = 0;
  bool framed = false;
  for (const std::string& e : SseData(r->body, &framed)) {
    if (e == "[DONE]") break;
    const json choice = Json(e)["choices"][0];
    const json& delta = choice["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
    if (delta.contains("content")) content += delta["content"];
    if (choice["logprobs"].is_object()) logprob_entries += choice["logprobs"]["content"].size();
  }
  EXPECT_TRUE(framed) << r->body;
  EXPECT_EQ(reasoning, "\nmull it over\n");
  EXPECT_EQ(content, "\n\nYes.");
  EXPECT_EQ(logprob_entries,
            Json(ts.Client()
                     ->Post("/v1/chat/completions", ChatBody(R"("logprobs":true)"), kJsonType)
                     ->body)["choices"][0]["logprobs"]["content"]
                .size());

  r = ts.Client()->Post("/v1/completions", R"({"model":"fake","prompt":"Hi","max_tokens":64})",
                        kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json(r->body)["choices"][0]["text"], bo.reply);
}

// --tool-call-parser hermes: the answer's <tool_call> blocks come back as
// tool_calls (finish_reason "tool_calls"), whole and streamed, to requests
// that offer tools; without tools the text is content as generated.
TEST(FrontendServerTest, ToolCallParserReturnsToolCalls) {
  TestServer ts;
  HttpServerOptions so;
  so.parse.tool_call_parser = ToolCallParser::kHermes;
  FakeBackend::Options bo;
  bo.reply =
      "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  ASSERT_TRUE(ts.Start(so, bo));
  const std::string tools =
      R"("max_tokens":200,"tools":[{"type":"function","function":{"name":"get_weather",)"
      R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])";
  auto r = ts.Client()->Post("/v1/chat/completions", ChatBody(tools), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  json choice = Json(r->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r->body;
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(call["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);

  r = ts.Client()->Post("/v1/chat/completions", ChatBody(tools + R"(,"stream":true)"), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string content, name, arguments, finish;
  bool framed = false;
  for (const std::string& e : SseData(r->body, &framed)) {
    if (e == "[DONE]") break;
    const json c = Json(e)["choices"][0];
    if (c["delta"].contains("content")) content += c["delta"]["content"];
    if (c["delta"].contains("tool_calls")) {
      for (const json& d : c["delta"]["tool_calls"]) {
        EXPECT_EQ(d["index"], 0);
        name += d["function"]["name"].get<std::string>();
        arguments += d["function"]["arguments"].get<std::string>();
      }
    }
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_TRUE(framed);
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(json::parse(arguments), json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(finish, "tool_calls");

  // No tools offered (or tool_choice "none"): the text as generated.
  for (const std::string extra :
       {std::string(R"("max_tokens":200)"), tools + R"(,"tool_choice":"none")"}) {
    r = ts.Client()->Post("/v1/chat/completions", ChatBody(extra), kJsonType);
    ASSERT_EQ(r->status, 200) << r->body;
    choice = Json(r->body)["choices"][0];
    EXPECT_EQ(choice["message"]["content"], bo.reply) << extra;
    EXPECT_FALSE(choice["message"].contains("tool_calls")) << extra;
    EXPECT_EQ(choice["finish_reason"], "stop") << extra;
  }
}

// tool_choice "required": the calls stream as they are written (the id
// and name in a call's first delta, before its arguments are done; the
// arguments in pieces), and add up to the calls of the answer given whole.
// Then a named function.
TEST(FrontendServerTest, ForcedToolCallsStreamAsWritten) {
  TestServer ts;
  FakeBackend::Options bo;
  bo.reply =
      "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": [1, 2]}}, "
      "{\"name\": \"now\", \"parameters\": {}}]";
  ASSERT_TRUE(ts.Start(HttpServerOptions(), bo));
  const std::string tools =
      R"("max_tokens":200,"tool_choice":"required","tools":[{"type":"function","function":)"
      R"({"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},)"
      R"("days":{"type":"array"}}}}},{"type":"function","function":{"name":"now"}}])";
  auto r = ts.Client()->Post("/v1/chat/completions", ChatBody(tools), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  const json whole = Json(r->body)["choices"][0];
  EXPECT_EQ(whole["finish_reason"], "tool_calls");
  ASSERT_EQ(whole["message"]["tool_calls"].size(), 2u) << r->body;

  r = ts.Client()->Post("/v1/chat/completions", ChatBody(tools + R"(,"stream":true)"), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::string> names(2), arguments(2);
  std::string finish;
  int argument_pieces = 0;
  bool named_before_done = false;  // call 0's name came before its arguments were whole
  bool framed = false;
  for (const std::string& e : SseData(r->body, &framed)) {
    if (e == "[DONE]") break;
    const json c = Json(e)["choices"][0];
    EXPECT_FALSE(c["delta"].contains("content") &&
                 !c["delta"]["content"].get<std::string>().empty())
        << e;
    if (c["delta"].contains("tool_calls")) {
      for (const json& d : c["delta"]["tool_calls"]) {
        const size_t i = d["index"].get<size_t>();
        ASSERT_LT(i, 2u) << e;
        if (d.contains("id")) {
          EXPECT_EQ(d["type"], "function");
          EXPECT_TRUE(names[i].empty()) << "a call is named once: " << e;
          names[i] = d["function"]["name"];
          if (i == 0) named_before_done = arguments[0].empty();
        } else {
          EXPECT_FALSE(d["function"].contains("name")) << e;
        }
        arguments[i] += d["function"]["arguments"].get<std::string>();
        argument_pieces += !d["function"]["arguments"].get<std::string>().empty();
      }
    }
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_TRUE(framed);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_TRUE(named_before_done);
  EXPECT_GT(argument_pieces, 2);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(names[i], whole["message"]["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(arguments[i], whole["message"]["tool_calls"][i]["function"]["arguments"]);
  }
  EXPECT_EQ(arguments[0], R"({"city":"Paris","days":[1,2]})");

  // A named function: the same calls, but finish_reason "stop", as OpenAI
  // and vLLM report it.
  std::string named = tools;
  named.replace(named.find(R"("required")"), std::string(R"("required")").size(),
                R"({"type":"function","function":{"name":"get_weather"}})");
  r = ts.Client()->Post("/v1/chat/completions", ChatBody(named), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json(r->body)["choices"][0]["finish_reason"], "stop") << r->body;
  EXPECT_EQ(Json(r->body)["choices"][0]["message"]["tool_calls"].size(), 2u) << r->body;
  r = ts.Client()->Post("/v1/chat/completions", ChatBody(named + R"(,"stream":true)"), kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  finish.clear();
  for (const std::string& e : SseData(r->body, &framed)) {
    if (e == "[DONE]") break;
    const json c = Json(e)["choices"][0];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(finish, "stop");
}

TEST(FrontendServerTest, ChatStreamingFraming) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  auto r = ts.Client()->Post(
      "/v1/chat/completions",
      ChatBody(
          R"("stream":true,"max_tokens":6,"stream_options":{"include_usage":true})"),
      kJsonType);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  bool framed = false;
  auto events = SseData(r->body, &framed);
  ASSERT_TRUE(framed) << r->body;
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string id, text, finish;
  int role_chunks = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json chunk = Json(events[i]);
    ASSERT_TRUE(chunk.is_object()) << events[i];
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (id.empty()) id = chunk["id"];
    EXPECT_EQ(chunk["id"], id);
    if (i + 2 == events.size()) {  // the usage chunk
      EXPECT_TRUE(chunk["choices"].empty());
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 6);
      continue;
    }
    EXPECT_TRUE(chunk["usage"].is_null());
    const json& choice = chunk["choices"][0];
    if (choice["delta"].contains("role")) {
      EXPECT_EQ(i, 0u);
      ++role_chunks;
    }
    if (choice["delta"].contains("content")) text += choice["delta"]["content"];
    if (!choice["finish_reason"].is_null()) {
      EXPECT_EQ(i + 3, events.size());  // the last choice chunk
      finish = choice["finish_reason"];
    }
  }
  EXPECT_EQ(role_chunks, 1);
  EXPECT_EQ(text, "Hello,");
  EXPECT_EQ(finish, "length");
}

TEST(FrontendServerTest, CompletionStreamingWithStopString) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  auto r = ts.Client()->Post(
      "/v1/completions",
      R"({"prompt":"x","stream":true,"max_tokens":30,"stop":[","]})",
      kJsonType);
  ASSERT_EQ(r->status, 200) << r->body;
  bool framed = false;
  auto events = SseData(r->body, &framed);
  ASSERT_TRUE(framed);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  json last;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    last = Json(events[i]);
    EXPECT_EQ(last["object"], "text_completion");
    EXPECT_FALSE(last.contains("usage"));  // not asked for
    text += last["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["stop_reason"], ",");
}

TEST(FrontendServerTest, BadRequests) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  auto c = ts.Client();
  ExpectError(c->Post("/v1/completions", "{not json", kJsonType), 400, "body");
  ExpectError(c->Post("/v1/completions", R"({"prompt":"x","max_tokens":"9"})",
                      kJsonType),
              400, "max_tokens");
  ExpectError(c->Post("/v1/completions", R"({"prompt":"x","model":"gpt-4"})",
                      kJsonType),
              404, "model");
  ExpectError(c->Post("/v1/chat/completions", ChatBody(R"("n":2)"), kJsonType),
              400, "n");
  ExpectError(
      c->Post("/v1/completions",
              R"({"prompt":")" + std::string(300, 'a') + R"("})", kJsonType),
      400, "prompt");
  EXPECT_TRUE(ts.backend->submitted().empty());
}

TEST(FrontendServerTest, ApiKey) {
  TestServer ts;
  HttpServerOptions o;
  o.api_key = "sekret";
  ASSERT_TRUE(ts.Start(o));
  auto c = ts.Client();
  ExpectError(c->Get("/v1/models"), 401);
  ExpectError(c->Get("/v1/models", {{"Authorization", "Bearer wrong"}}), 401);
  ExpectError(c->Get("/v1/models", {{"Authorization", "sekret"}}), 401);
  EXPECT_EQ(c->Get("/v1/models", {{"Authorization", "Bearer sekret"}})->status,
            200);
  auto ok = c->Post("/v1/completions", {{"Authorization", "Bearer sekret"}},
                    R"({"prompt":"x","max_tokens":1})", kJsonType);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(c->Get("/health")->status, 200);  // probes need no key
  EXPECT_EQ(c->Get("/metrics")->status, 200);
}

TEST(FrontendServerTest, TooManyConcurrentRequestsGet429) {
  TestServer ts;
  HttpServerOptions o;
  o.max_concurrent_requests = 1;
  ASSERT_TRUE(ts.Start(o));
  ts.backend->set_paused(true);
  std::thread first([&] {
    auto r = ts.Client()->Post("/v1/completions",
                               R"({"prompt":"x","max_tokens":2})", kJsonType);
    EXPECT_EQ(r->status, 200);
  });
  ASSERT_TRUE(ts.backend->WaitSubmitted(1, 5s));
  auto r = ts.Client()->Post("/v1/completions", R"({"prompt":"y"})", kJsonType);
  ExpectError(r, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Json(r->body)["error"]["code"], "rate_limit_exceeded");
  ts.backend->set_paused(false);
  first.join();
  EXPECT_EQ(ts.server->in_flight(), 0);
  auto after = ts.Client()->Post("/v1/completions",
                                 R"({"prompt":"y","max_tokens":1})", kJsonType);
  EXPECT_EQ(after->status, 200);
}

TEST(FrontendServerTest, BackendOverloadGets503WithRetryAfter) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  ts.backend->set_submit_status(absl::ResourceExhaustedError("KV cache full"));
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    auto r =
        ts.Client()->Post(path,
                          std::string(path).find("chat") != std::string::npos
                              ? ChatBody(R"("stream":true)")
                              : R"({"prompt":"x"})",
                          kJsonType);
    ExpectError(r, 503);
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
    EXPECT_EQ(Json(r->body)["error"]["message"], "KV cache full");
  }
  EXPECT_EQ(ts.server->in_flight(), 0);
  // Refused requests are not counted as finished.
  EXPECT_EQ(
      ts.Client()->Get("/metrics")->body.find("vllm:request_success_total{"),
      std::string::npos);
}

TEST(FrontendServerTest, PartlyRefusedBatchWithdrawsWhatWasSubmitted) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  ts.backend->set_paused(true);
  ts.backend->set_submit_budget(1);
  auto r = ts.Client()->Post(
      "/v1/completions", R"({"prompt":["a","b"],"max_tokens":2})", kJsonType);
  ExpectError(r, 503);
  ASSERT_EQ(ts.backend->submitted().size(), 1u);
  EXPECT_TRUE(
      ts.backend->cancelled().count(ts.backend->submitted()[0].request_id));
  EXPECT_EQ(ts.backend->active(), 0u);
}

TEST(FrontendServerTest, BackendFailureMidRequest) {
  TestServer ts;
  FakeBackend::Options bo;
  bo.fail_after_tokens = 3;
  ASSERT_TRUE(ts.Start({}, bo));
  auto c = ts.Client();
  auto plain = c->Post("/v1/completions", R"({"prompt":"x","max_tokens":10})",
                       kJsonType);
  ExpectError(plain, 503);
  auto streamed =
      c->Post("/v1/completions",
              R"({"prompt":"x","max_tokens":10,"stream":true})", kJsonType);
  ASSERT_EQ(streamed->status, 200);
  bool framed = false;
  auto events = SseData(streamed->body, &framed);
  ASSERT_TRUE(framed);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  json err = Json(events[events.size() - 2]);
  EXPECT_EQ(err["error"]["message"], "worker lost");
}

// Streams a request and drops the connection after `chunks` chunks; returns
// the backend id of the request and when the client hung up.
std::pair<std::string, std::chrono::steady_clock::time_point> StreamThenHangUp(
    TestServer& ts, const std::string& path, const std::string& body,
    int chunks) {
  auto c = ts.Client();
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", kJsonType);
  int seen = 0;
  std::chrono::steady_clock::time_point hung_up;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    if (++seen < chunks) return true;
    hung_up = std::chrono::steady_clock::now();
    return false;
  };
  auto r = c->send(req);
  EXPECT_FALSE(r);  // cancelled by the receiver
  c.reset();        // close the socket
  auto sent = ts.backend->last_submitted();
  return {sent ? sent->request_id : "", hung_up};
}

TEST(FrontendServerTest, DisconnectMidStreamCancelsWithinASecond) {
  TestServer ts;
  FakeBackend::Options bo;
  bo.step = 20ms;
  ASSERT_TRUE(ts.Start({}, bo));
  auto [id, hung_up] =
      StreamThenHangUp(ts, "/v1/completions",
                       R"({"prompt":"x","max_tokens":200,"stream":true})", 3);
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(ts.backend->WaitCancelled(id, 1s));
  auto latency = std::chrono::steady_clock::now() - hung_up;
  EXPECT_LT(latency, 1s);
  for (int i = 0; i < 100 && ts.server->in_flight() > 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(ts.server->in_flight(), 0);
  EXPECT_EQ(ts.backend->active(), 0u);
}

TEST(FrontendServerTest, DisconnectWhileBackendIsSilentCancels) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  ts.backend->set_paused(
      true);  // no events at all: only the idle check can notice
  auto [id, hung_up] =
      StreamThenHangUp(ts, "/v1/chat/completions",
                       ChatBody(R"("stream":true,"max_tokens":50)"), 1);
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(ts.backend->WaitCancelled(id, 1s));
  EXPECT_LT(std::chrono::steady_clock::now() - hung_up, 1s);
  auto metrics = ts.Client()->Get("/metrics");
  EXPECT_NE(metrics->body.find(R"(finished_reason="abort")"),
            std::string::npos);
}

TEST(FrontendServerTest, MetricsAfterTraffic) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  auto c = ts.Client();
  ASSERT_EQ(
      c->Post("/v1/completions", R"({"prompt":"x","max_tokens":4})", kJsonType)
          ->status,
      200);
  ts.server->metrics().SetKvBlocks("gpu", 5, 50);
  ts.server->metrics().ObserveWorkerStep("gpu_worker_0", 0.01);
  auto r = c->Get("/metrics");
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
  for (const char* name :
       {"vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:request_queue_time_seconds_count",
        "vllm:prompt_tokens_total{model_name=\"fake\"} 2",
        "vllm:generation_tokens_total{model_name=\"fake\"} 4",
        "vllm:request_success_total{finished_reason=\"length\",model_name="
        "\"fake\"} 1",
        "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc", "tandem_kv_blocks_used{pool=\"gpu\"} 5",
        "tandem_kv_blocks_used{pool=\"cpu\"} 0",
        "tandem_worker_step_seconds_count{worker=\"gpu_worker_0\"} 1",
        "tandem_http_requests_total{code=\"200\",endpoint=\"/v1/completions\"} "
        "1"}) {
    EXPECT_NE(r->body.find(name), std::string::npos) << name << "\n" << r->body;
  }
}

TEST(FrontendServerTest, GracefulStopCancelsStreams) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  ts.backend->set_paused(true);
  std::atomic<bool> done{false};
  std::thread client([&] {
    auto r = ts.Client()->Post("/v1/completions",
                               R"({"prompt":"x","stream":true})", kJsonType);
    done = true;
  });
  ASSERT_TRUE(ts.backend->WaitSubmitted(1, 5s));
  auto id = ts.backend->last_submitted()->request_id;
  auto t0 = std::chrono::steady_clock::now();
  ts.server->Stop(100ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(ts.backend->cancelled().count(id));
  client.join();
  EXPECT_TRUE(done);
}

}  // namespace
}  // namespace tandem::frontend
