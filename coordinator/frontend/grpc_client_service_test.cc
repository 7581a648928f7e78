// The client gRPC API end to end: a real grpc::Server on 127.0.0.1:0 with the
// service over the fake backend and the fake byte-level tokenizer, and a real
// stub. The fake replies "Hello, world! This is the fake backend." one byte
// token per step, then <eos> (257).
#include "coordinator/frontend/grpc_client_service.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/frontend/testing/fake_backend.h"
#include "coordinator/frontend/testing/fake_text_processor.h"
#include "coordinator/structured/schema_grammar.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/client.grpc.pb.h"

namespace tandem::frontend {
namespace {

using ::testing::ElementsAre;
using testing::FakeBackend;
using testing::FakeTextProcessor;
using ::testing::HasSubstr;

constexpr char kReply[] = "Hello, world! This is the fake backend.";
constexpr auto kWait = std::chrono::seconds(10);

struct Harness {
  explicit Harness(FakeBackend::Options backend_options = {},
                   bool with_tokenizer = true,
                   GrpcClientServiceOptions options = DefaultOptions())
      : backend(backend_options) {
    if (!with_tokenizer) options.parse.vocab_size = FakeTextProcessor::kVocab;
    auto created = GrpcClientService::Create(std::move(options), &backend,
                                             with_tokenizer ? &text : nullptr);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return;
    service = std::move(*created);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    EXPECT_NE(server, nullptr);
    EXPECT_GT(port, 0);
    stub = proto::Tandem::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  ~Harness() {
    // Before the backend goes: handlers still waiting are cancelled.
    if (server) server->Shutdown(std::chrono::system_clock::now() + kWait);
  }

  static GrpcClientServiceOptions DefaultOptions() {
    GrpcClientServiceOptions o;
    o.parse.served_model_names = {"m", "m-alias"};
    o.poll_interval = std::chrono::milliseconds(5);
    return o;
  }

  struct Result {
    std::vector<proto::GenerateResponse> messages;
    grpc::Status status;
    std::string text;             // concatenated deltas
    std::vector<int32_t> tokens;  // concatenated ids
  };
  Result Generate(const proto::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    auto reader = stub->Generate(&context, request);
    Result r;
    proto::GenerateResponse msg;
    while (reader->Read(&msg)) {
      r.text += msg.text();
      r.tokens.insert(r.tokens.end(), msg.token_ids().begin(),
                      msg.token_ids().end());
      r.messages.push_back(msg);
    }
    r.status = reader->Finish();
    return r;
  }

  FakeBackend backend;
  FakeTextProcessor text;
  std::unique_ptr<GrpcClientService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<proto::Tandem::Stub> stub;
};

proto::GenerateRequest TextRequest(const std::string& prompt) {
  proto::GenerateRequest r;
  r.set_text(prompt);
  return r;
}

proto::GenerateRequest IdsRequest(const std::vector<int32_t>& ids) {
  proto::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
  return r;
}

TEST(GrpcClientServiceTest, StreamsTokensAndTextUntilEos) {
  Harness h;
  Harness::Result r = h.Generate(TextRequest("Hi"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, kReply);
  std::vector<int32_t> expected(std::begin(kReply), std::end(kReply) - 1);
  expected.push_back(FakeTextProcessor::kEos);
  EXPECT_EQ(r.tokens, expected);
  // One message per backend event (one token each); only the last one has
  // a finish reason and usage.
  ASSERT_EQ(r.messages.size(), expected.size());
  for (size_t i = 0; i + 1 < r.messages.size(); ++i) {
    EXPECT_EQ(r.messages[i].finish_reason(), "") << i;
    EXPECT_FALSE(r.messages[i].has_usage()) << i;
    EXPECT_EQ(r.messages[i].logprobs_size(), 0);
  }
  const proto::GenerateResponse& last = r.messages.back();
  EXPECT_EQ(last.finish_reason(), "stop");
  EXPECT_EQ(last.usage().prompt_tokens(), 3);  // <bos> H i
  EXPECT_EQ(last.usage().completion_tokens(),
            static_cast<int64_t>(expected.size()));
  EXPECT_FALSE(last.usage().has_cached_prompt_tokens());  // the fake caches nothing
  auto submitted = h.backend.last_submitted();
  ASSERT_TRUE(submitted.has_value());
  EXPECT_THAT(submitted->prompt_ids,
              ElementsAre(FakeTextProcessor::kBos, 'H', 'i'));
  EXPECT_EQ(submitted->sampling.max_tokens,
            256 - 3);  // the rest of the context
  EXPECT_EQ(submitted->sampling.logprobs, -1);
}

TEST(GrpcClientServiceTest, MaxTokensEndsWithLengthAndSamplingIsPassedOn) {
  Harness h;
  proto::GenerateRequest req = IdsRequest({10, 11, 12, 13});
  req.set_model("m-alias");
  proto::SamplingParams* s = req.mutable_sampling();
  s->set_max_tokens(5);
  s->set_temperature(0.5f);
  s->set_top_k(40);
  s->set_seed(7);
  s->add_stop_token_ids(3);
  s->add_stop("");  // dropped, as in the HTTP API
  s->add_stop("zzz");
  s->set_ignore_eos(true);
  (*s->mutable_logit_bias())[65] = -3.5f;
  Harness::Result r = h.Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "Hello");
  EXPECT_EQ(r.messages.back().finish_reason(), "length");
  EXPECT_EQ(r.messages.back().usage().prompt_tokens(), 4);
  EXPECT_EQ(r.messages.back().usage().completion_tokens(), 5);
  auto g = h.backend.last_submitted();
  ASSERT_TRUE(g.has_value());
  EXPECT_THAT(g->prompt_ids, ElementsAre(10, 11, 12, 13));
  EXPECT_EQ(g->sampling.max_tokens, 5);
  EXPECT_FLOAT_EQ(g->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g->sampling.top_p, 1.0f);  // 0 = all
  EXPECT_EQ(g->sampling.top_k, 40);
  EXPECT_EQ(g->sampling.seed, 7u);
  EXPECT_THAT(g->sampling.stop_token_ids, ElementsAre(3));
  EXPECT_THAT(g->sampling.stop, ElementsAre("zzz"));
  EXPECT_TRUE(g->sampling.ignore_eos);
  ASSERT_EQ(g->sampling.logit_bias.count(65), 1u);
  EXPECT_FLOAT_EQ(g->sampling.logit_bias.at(65), -3.5f);
}

// Structured outputs: a JSON Schema's text (properties in the order it
// declares them), any JSON object, or one of a list of strings, passed on
// compiled as the HTTP API passes them.
TEST(GrpcClientServiceTest, ConstraintsArePassedOnCompiled) {
  Harness h;
  proto::GenerateRequest req = IdsRequest({10, 11});
  req.mutable_sampling()->set_max_tokens(2);
  req.mutable_sampling()->set_json_schema(
      R"({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
          "required": ["b", "a"]})");
  ASSERT_TRUE(h.Generate(req).status.ok());
  auto g = h.backend.last_submitted();
  ASSERT_TRUE(g.has_value() && g->sampling.json_schema != nullptr);
  auto holds = [](const std::shared_ptr<const structured::CompiledSchema>& s,
                  const std::string& text) {
    structured::SchemaGrammar grammar(s.get());
    return grammar.Feed(text) && grammar.IsComplete();
  };
  EXPECT_TRUE(holds(g->sampling.json_schema, R"({"b": 1, "a": 2})"));
  EXPECT_FALSE(holds(g->sampling.json_schema, R"({"a": 2, "b": 1})"));
  EXPECT_FALSE(g->sampling.json_object);

  req.mutable_sampling()->set_json_object(true);
  ASSERT_TRUE(h.Generate(req).status.ok());
  g = h.backend.last_submitted();
  EXPECT_TRUE(g->sampling.json_object);
  EXPECT_EQ(g->sampling.json_schema, nullptr);

  req.mutable_sampling()->mutable_choice()->add_choices("yes");
  req.mutable_sampling()->mutable_choice()->add_choices("no");
  ASSERT_TRUE(h.Generate(req).status.ok());
  g = h.backend.last_submitted();
  ASSERT_NE(g->sampling.json_schema, nullptr);
  EXPECT_FALSE(g->sampling.json_object);
  EXPECT_TRUE(holds(g->sampling.json_schema, "no"));
  EXPECT_FALSE(holds(g->sampling.json_schema, "\"no\""));
}

TEST(GrpcClientServiceTest, StopStringCutsTheText) {
  Harness h;
  proto::GenerateRequest req = TextRequest("Hi");
  // One character: the fake, unlike the step driver, does not hold back a
  // partial match.
  req.mutable_sampling()->add_stop(",");
  Harness::Result r = h.Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "Hello");
  EXPECT_EQ(r.messages.back().finish_reason(), "stop");
}

TEST(GrpcClientServiceTest, Logprobs) {
  Harness h;
  proto::GenerateRequest req = TextRequest("Hi");
  req.mutable_sampling()->set_max_tokens(4);
  req.mutable_sampling()->set_top_logprobs(2);
  Harness::Result r = h.Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.tokens.size(), 4u);
  for (const proto::GenerateResponse& m : r.messages) {
    ASSERT_EQ(m.logprobs_size(), m.token_ids_size());
    ASSERT_EQ(m.top_logprobs_size(), m.token_ids_size());
    for (int i = 0; i < m.token_ids_size(); ++i) {
      EXPECT_FLOAT_EQ(m.logprobs(i), -0.25f);
      const proto::TopLogprobs& top = m.top_logprobs(i);
      ASSERT_EQ(top.entries_size(), 2);
      EXPECT_EQ(top.entries(0).id(), m.token_ids(i));
      EXPECT_FLOAT_EQ(top.entries(0).logprob(), -0.25f);
      EXPECT_EQ(top.entries(1).id(), (m.token_ids(i) + 1) % 256);
      EXPECT_FLOAT_EQ(top.entries(1).logprob(), -1.5f);
    }
  }
  EXPECT_EQ(h.backend.last_submitted()->sampling.logprobs, 2);
}

TEST(GrpcClientServiceTest, ListModels) {
  Harness h;
  grpc::ClientContext context;
  proto::ListModelsResponse response;
  grpc::Status s =
      h.stub->ListModels(&context, proto::ListModelsRequest(), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.models_size(), 2);
  EXPECT_EQ(response.models(0).id(), "m");
  EXPECT_EQ(response.models(1).id(), "m-alias");
  EXPECT_EQ(response.models(0).max_context(), 256);
}

TEST(GrpcClientServiceTest, HealthFollowsReadiness) {
  Harness h;
  auto health = [&h] {
    grpc::ClientContext context;
    proto::HealthResponse response;
    grpc::Status s =
        h.stub->Health(&context, proto::HealthRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  };
  EXPECT_TRUE(health().ready());
  h.backend.set_ready(false);
  proto::HealthResponse loading = health();
  EXPECT_FALSE(loading.ready());
  EXPECT_THAT(loading.detail(), HasSubstr("loading"));
  // Not ready: Generate is refused as "try later", nothing reaches the
  // backend.
  Harness::Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(h.backend.submitted().empty());
  h.backend.set_ready(true);
  EXPECT_TRUE(health().ready());
}

TEST(GrpcClientServiceTest, ReadinessCallbackOverridesTheBackend) {
  std::atomic<bool> ready{false};
  GrpcClientServiceOptions o = Harness::DefaultOptions();
  o.ready = [&ready] { return ready.load(); };
  Harness h({}, true, o);
  grpc::ClientContext c1;
  proto::HealthResponse r1;
  ASSERT_TRUE(h.stub->Health(&c1, proto::HealthRequest(), &r1).ok());
  EXPECT_FALSE(r1.ready());
  ready = true;
  grpc::ClientContext c2;
  proto::HealthResponse r2;
  ASSERT_TRUE(h.stub->Health(&c2, proto::HealthRequest(), &r2).ok());
  EXPECT_TRUE(r2.ready());
}

TEST(GrpcClientServiceTest, UnknownModelIsNotFound) {
  Harness h;
  proto::GenerateRequest req = TextRequest("Hi");
  req.set_model("nope");
  Harness::Result r = h.Generate(req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(r.status.error_message(), HasSubstr("nope"));
  EXPECT_TRUE(r.messages.empty());
  EXPECT_TRUE(h.backend.submitted().empty());
}

struct BadCase {
  const char* name;
  std::function<void(proto::GenerateRequest*)> edit;
  const char* message;  // a substring of the error message
};

TEST(GrpcClientServiceTest, BadInputIsInvalidArgument) {
  const std::vector<BadCase> cases = {
      {"negative max_tokens", [](auto* r) { r->mutable_sampling()->set_max_tokens(-1); },
       "max_tokens"},
      {"max_tokens past the context", [](auto* r) { r->mutable_sampling()->set_max_tokens(254); },
       "maximum context length is 256"},
      {"prompt fills the context", [](auto* r) { r->set_text(std::string(255, 'a')); },
       "your prompt is 256 tokens"},
      {"no prompt", [](auto* r) { r->clear_prompt(); }, "'prompt' is required"},
      {"empty token ids", [](auto* r) { r->mutable_token_ids()->clear_ids(); },
       "at least one token"},
      {"token id out of vocabulary", [](auto* r) { r->mutable_token_ids()->add_ids(999); },
       "'token_ids[0]' must be in [0, 259], got 999"},
      {"negative token id", [](auto* r) { r->mutable_token_ids()->add_ids(-1); }, "token_ids[0]"},
      {"temperature", [](auto* r) { r->mutable_sampling()->set_temperature(3); },
       "'temperature' must be in [0, 2], got 3"},
      {"top_p", [](auto* r) { r->mutable_sampling()->set_top_p(1.5f); }, "top_p"},
      {"top_k", [](auto* r) { r->mutable_sampling()->set_top_k(-2); }, "top_k"},
      {"top_logprobs", [](auto* r) { r->mutable_sampling()->set_top_logprobs(21); },
       "'top_logprobs' must be in [-1, 20], got 21"},
      {"logit_bias id", [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[999] = 1; },
       "logit_bias token id 999 is out of vocabulary"},
      {"logit_bias value", [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[5] = 101; },
       "'logit_bias.5' must be in [-100, 100]"},
      {"stop_token_ids", [](auto* r) { r->mutable_sampling()->add_stop_token_ids(260); },
       "stop_token_ids[0]"},
      {"too many stop strings",
       [](auto* r) {
         for (int i = 0; i < 5; ++i)
           r->mutable_sampling()->add_stop(absl::StrCat("s", i));
       },
       "At most 4 stop sequences"},
      {"echo", [](auto* r) { r->set_echo(true); }, "echo"},
      {"json_schema not JSON", [](auto* r) { r->mutable_sampling()->set_json_schema("{"); },
       "'json_schema': unsupported JSON Schema: the schema is not valid JSON"},
      {"json_schema not enforced",
       [](auto* r) { r->mutable_sampling()->set_json_schema(R"({"multipleOf": 3})"); },
       "'multipleOf' is not supported"},
      {"no choices", [](auto* r) { r->mutable_sampling()->mutable_choice(); },
       "'choice': there are no choices"},
  };
  Harness h;
  for (const BadCase& c : cases) {
    // The token-id cases switch the prompt oneof from text to token_ids.
    proto::GenerateRequest req = TextRequest("Hi");
    c.edit(&req);
    Harness::Result r = h.Generate(req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.name << ": " << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.message)) << c.name;
    EXPECT_TRUE(r.messages.empty()) << c.name;
  }
  EXPECT_TRUE(h.backend.submitted().empty());
}

TEST(GrpcClientServiceTest, WithoutTokenizerTextIsRefusedAndIdsWork) {
  Harness h({}, /*with_tokenizer=*/false);
  Harness::Result text = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(text.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(text.status.error_message(), HasSubstr("without a tokenizer"));
  proto::GenerateRequest stop = IdsRequest({1, 2});
  stop.mutable_sampling()->add_stop("x");
  EXPECT_EQ(h.Generate(stop).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(h.backend.submitted().empty());

  proto::GenerateRequest ids = IdsRequest({1, 2, 259});  // 259 < vocab 260
  ids.mutable_sampling()->set_max_tokens(3);
  Harness::Result r = h.Generate(ids);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_THAT(r.tokens, ElementsAre('H', 'e', 'l'));
  EXPECT_EQ(r.messages.back().finish_reason(), "length");
  EXPECT_EQ(r.messages.back().usage().prompt_tokens(), 3);
}

TEST(GrpcClientServiceTest, CreateRejectsIncompleteOptions) {
  FakeBackend backend;
  FakeTextProcessor text;
  GrpcClientServiceOptions no_names;
  EXPECT_FALSE(GrpcClientService::Create(no_names, &backend, &text).ok());
  GrpcClientServiceOptions no_vocab = Harness::DefaultOptions();
  EXPECT_FALSE(GrpcClientService::Create(no_vocab, &backend, nullptr).ok());
  EXPECT_FALSE(
      GrpcClientService::Create(Harness::DefaultOptions(), nullptr, &text)
          .ok());
}

TEST(GrpcClientServiceTest, BackendOverloadKeepsItsCode) {
  Harness h;
  h.backend.set_submit_status(absl::ResourceExhaustedError("queue is full"));
  Harness::Result full = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(full.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(full.status.error_message(), "queue is full");
  EXPECT_TRUE(full.messages.empty());
  h.backend.set_submit_status(absl::UnavailableError("draining"));
  EXPECT_EQ(h.Generate(TextRequest("Hi")).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  h.backend.set_submit_status(absl::OkStatus());
  EXPECT_TRUE(h.Generate(TextRequest("Hi")).status.ok());
}

TEST(GrpcClientServiceTest, MidStreamFailureEndsTheStreamWithItsStatus) {
  FakeBackend::Options o;
  o.fail_after_tokens = 3;
  Harness h(o);
  Harness::Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("worker lost"));
  EXPECT_EQ(r.text, "Hel");  // what was generated before the failure
  ASSERT_FALSE(r.messages.empty());
  EXPECT_EQ(r.messages.back().finish_reason(), "error");
  EXPECT_EQ(r.messages.back().usage().completion_tokens(), 3);
}

TEST(GrpcClientServiceTest, ClientCancelMidStreamAbortsTheRequest) {
  FakeBackend::Options o;
  o.step = std::chrono::milliseconds(20);
  Harness h(o);
  proto::GenerateRequest req = TextRequest("Hi");
  req.mutable_sampling()->set_ignore_eos(true);
  req.mutable_sampling()->set_max_tokens(200);  // ~4 s: far from finishing
  grpc::ClientContext context;
  auto reader = h.stub->Generate(&context, req);
  proto::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_TRUE(reader->Read(&msg));
  auto g = h.backend.last_submitted();
  ASSERT_TRUE(g.has_value());
  context.TryCancel();
  EXPECT_TRUE(h.backend.WaitCancelled(g->request_id, kWait));
  EXPECT_EQ(h.backend.active(), 0u);
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(GrpcClientServiceTest, ClientCancelWhileWaitingAbortsTheRequest) {
  Harness h;
  h.backend.set_paused(true);  // no event will come to notice the cancel
  grpc::ClientContext context;
  auto reader = h.stub->Generate(&context, TextRequest("Hi"));
  ASSERT_TRUE(h.backend.WaitSubmitted(1, kWait));
  const std::string id = h.backend.last_submitted()->request_id;
  EXPECT_TRUE(h.backend.cancelled().empty());
  context.TryCancel();
  EXPECT_TRUE(h.backend.WaitCancelled(id, kWait));
  EXPECT_EQ(h.backend.active(), 0u);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace tandem::frontend
