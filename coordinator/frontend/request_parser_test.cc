// Table tests of request parsing and validation: every rejection maps to an
// HTTP status and names the offending param; accepted requests carry the
// OpenAI / vLLM semantics into the backend request.
#include "coordinator/frontend/request_parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/json_fields.h"
#include "coordinator/frontend/testing/fake_text_processor.h"
#include "coordinator/structured/schema_grammar.h"

namespace tandem::frontend {
namespace {

using testing::FakeTextProcessor;

ParseOptions Options() {
  ParseOptions o;
  o.served_model_names = {"m", "m-alias"};
  o.max_context = 64;
  o.vocab_size = FakeTextProcessor::kVocab;
  return o;
}

// As the server parses a body: from its text, which it also passes on
// (JSON Schemas are read from it in the order written).
absl::StatusOr<ParsedRequest> Parse(Endpoint ep, const std::string& body,
                                    const ParseOptions& o = Options()) {
  static const FakeTextProcessor tp;
  auto j = ParseRequestBody(body);
  if (!j.ok()) return j.status();
  return ep == Endpoint::kChat ? ParseChatRequest(*j, o, tp, body)
                               : ParseCompletionRequest(*j, o, tp, body);
}

struct ErrorCase {
  Endpoint endpoint;
  std::string body;
  int http_status;
  std::string param;
};

std::string Msgs() { return R"("messages":[{"role":"user","content":"hi"}])"; }

std::vector<ErrorCase> ErrorCases() {
  const Endpoint C = Endpoint::kCompletions, H = Endpoint::kChat;
  auto c = [](const std::string& fields) {
    return R"({"prompt":"hi",)" + fields + "}";
  };
  auto h = [](const std::string& fields) {
    return "{" + Msgs() + "," + fields + "}";
  };
  return {
      // The body itself.
      {C, "{", 400, "body"},
      {C, "", 400, "body"},
      {C, "[]", 400, "body"},
      {C, "null", 400, "body"},
      {C, "\"prompt\"", 400, "body"},
      {H, "{\"messages\":[{]}", 400, "body"},
      {C, "{\"prompt\":\"a\"}garbage", 400, "body"},
      // prompt.
      {C, "{}", 400, "prompt"},
      {C, R"({"prompt":5})", 400, "prompt"},
      {C, R"({"prompt":{}})", 400, "prompt"},
      {C, R"({"prompt":[]})", 400, "prompt"},
      {C, R"({"prompt":[true]})", 400, "prompt[0]"},
      {C, R"({"prompt":["a",1]})", 400, "prompt[1]"},
      {C, R"({"prompt":[[1,2],[3,"x"]]})", 400, "prompt[1][1]"},
      {C, R"({"prompt":[[1,2],[]]})", 400, "prompt[1]"},
      {C, R"({"prompt":[1,9999]})", 400, "prompt[1]"},
      {C, R"({"prompt":[-1]})", 400, "prompt[0]"},
      {C, R"({"prompt":[1.5]})", 400, "prompt[0]"},
      {C, R"({"prompt":"","add_special_tokens":false})", 400, "prompt"},
      {C, R"({"prompt":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       400, "prompt"},
      {C, R"({"prompt":")" + std::string(63, 'x') + R"("})", 400, "prompt"},
      {C, R"({"prompt":"hi","add_special_tokens":"yes"})", 400, "add_special_tokens"},
      // max_tokens.
      {C, c(R"("max_tokens":"5")"), 400, "max_tokens"},
      {C, c(R"("max_tokens":0)"), 400, "max_tokens"},
      {C, c(R"("max_tokens":-1)"), 400, "max_tokens"},
      {C, c(R"("max_tokens":1.5)"), 400, "max_tokens"},
      {C, c(R"("max_tokens":1e30)"), 400, "max_tokens"},
      {C, c(R"("max_tokens":18446744073709551615)"), 400, "max_tokens"},
      {C, c(R"("max_tokens":true)"), 400, "max_tokens"},
      {C, c(R"("max_tokens":62)"), 400, "max_tokens"},
      {H, h(R"("max_completion_tokens":0)"), 400, "max_completion_tokens"},
      {H, h(R"("max_completion_tokens":1000)"), 400, "max_completion_tokens"},
      {H, h(R"("max_tokens":1000)"), 400, "max_tokens"},
      {H, h(R"("max_tokens":[1])"), 400, "max_tokens"},
      // Sampling.
      {C, c(R"("temperature":"hot")"), 400, "temperature"},
      {C, c(R"("temperature":-0.1)"), 400, "temperature"},
      {C, c(R"("temperature":2.5)"), 400, "temperature"},
      {C, c(R"("top_p":0)"), 400, "top_p"},
      {C, c(R"("top_p":1.5)"), 400, "top_p"},
      {C, c(R"("top_p":"x")"), 400, "top_p"},
      {C, c(R"("top_k":-2)"), 400, "top_k"},
      {C, c(R"("top_k":"5")"), 400, "top_k"},
      {C, c(R"("min_p":2)"), 400, "min_p"},
      {C, c(R"("presence_penalty":3)"), 400, "presence_penalty"},
      {C, c(R"("frequency_penalty":-3)"), 400, "frequency_penalty"},
      {C, c(R"("repetition_penalty":0)"), 400, "repetition_penalty"},
      {C, c(R"("seed":"1")"), 400, "seed"},
      {C, c(R"("seed":1.5)"), 400, "seed"},
      {C, c(R"("n":2)"), 400, "n"},
      {C, c(R"("n":0)"), 400, "n"},
      {C, c(R"("n":"1")"), 400, "n"},
      {H, h(R"("n":3)"), 400, "n"},
      {C, c(R"("best_of":2)"), 400, "best_of"},
      {C, c(R"("stream":"yes")"), 400, "stream"},
      {C, c(R"("stream_options":{"include_usage":true})"), 400, "stream_options"},
      {C, c(R"("stream":true,"stream_options":5)"), 400, "stream_options"},
      {C, c(R"("stream":true,"stream_options":{"include_usage":"x"})"), 400,
       "stream_options.include_usage"},
      {C, c(R"("stop":5)"), 400, "stop"},
      {C, c(R"("stop":[1])"), 400, "stop[0]"},
      {C, c(R"("stop":["a","b","c","d","e"])"), 400, "stop"},
      {C, c(R"("stop_token_ids":[999])"), 400, "stop_token_ids[0]"},
      {C, c(R"("stop_token_ids":"1")"), 400, "stop_token_ids"},
      {C, c(R"("include_stop_str_in_output":1)"), 400, "include_stop_str_in_output"},
      {C, c(R"("ignore_eos":"x")"), 400, "ignore_eos"},
      {C, c(R"("skip_special_tokens":0)"), 400, "skip_special_tokens"},
      {C, c(R"("min_tokens":-1)"), 400, "min_tokens"},
      {C, c(R"("min_tokens":20,"max_tokens":10)"), 400, "min_tokens"},
      {C, c(R"("user":5)"), 400, "user"},
      {C, c(R"("return_tokens_as_token_ids":"x")"), 400, "return_tokens_as_token_ids"},
      // logit_bias.
      {C, c(R"("logit_bias":[])"), 400, "logit_bias"},
      {C, c(R"("logit_bias":{"abc":1})"), 400, "logit_bias"},
      {C, c(R"("logit_bias":{"-1":1})"), 400, "logit_bias"},
      {C, c(R"("logit_bias":{"999":1})"), 400, "logit_bias"},
      {C, c(R"("logit_bias":{"5":101})"), 400, "logit_bias.5"},
      {C, c(R"("logit_bias":{"5":-100.5})"), 400, "logit_bias.5"},
      {C, c(R"("logit_bias":{"5":"x"})"), 400, "logit_bias.5"},
      // Log-probs and echo.
      {C, c(R"("logprobs":true)"), 400, "logprobs"},
      {C, c(R"("logprobs":21)"), 400, "logprobs"},
      {C, c(R"("logprobs":-1)"), 400, "logprobs"},
      {C, c(R"("echo":"y")"), 400, "echo"},
      {C, c(R"("suffix":"abc")"), 400, "suffix"},
      {H, h(R"("logprobs":1)"), 400, "logprobs"},
      {H, h(R"("top_logprobs":2)"), 400, "top_logprobs"},
      {H, h(R"("logprobs":true,"top_logprobs":21)"), 400, "top_logprobs"},
      {H, h(R"("logprobs":true,"top_logprobs":"2")"), 400, "top_logprobs"},
      // model.
      {C, c(R"("model":5)"), 400, "model"},
      {C, c(R"("model":"nope")"), 404, "model"},
      {H, h(R"("model":"")"), 404, "model"},
      // messages.
      {H, "{}", 400, "messages"},
      {H, R"({"messages":"hi"})", 400, "messages"},
      {H, R"({"messages":[]})", 400, "messages"},
      {H, R"({"messages":[5]})", 400, "messages[0]"},
      {H, R"({"messages":[{"content":"x"}]})", 400, "messages[0].role"},
      {H, R"({"messages":[{"role":5,"content":"x"}]})", 400, "messages[0].role"},
      {H, R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {H, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {H, R"({"messages":[{"role":"user","content":5}]})", 400, "messages[0].content"},
      {H, R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":[5]}]})", 400,
       "messages[1].content[0]"},
      {H, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", 400,
       "messages[0].content[0].type"},
      {H, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", 400,
       "messages[0].content[0].text"},
      {H, R"({"messages":[{"role":"user","content":[{"text":"a"}]}]})", 400,
       "messages[0].content[0].type"},
      {H, R"({"messages":[{"role":"user","content":"a","name":5}]})", 400, "messages[0].name"},
      {H, R"({"messages":[{"role":"assistant","content":null,"tool_calls":{}}]})", 400,
       "messages[0].tool_calls"},
      {H, R"({"messages":[{"role":"user","content":")" + std::string(70, 'x') + R"("}]})", 400,
       "messages"},
      // Chat options.
      {H, h(R"("tools":"x")"), 400, "tools"},
      {H, h(R"("tool_choice":"required")"), 400, "tool_choice"},
      {H, h(R"("tool_choice":{"type":"function"})"), 400, "tool_choice"},
      {H, h(R"("tool_choice":5)"), 400, "tool_choice"},
      {H, h(R"("response_format":"json")"), 400, "response_format"},
      {H, h(R"("response_format":{"type":"json_schema","json_schema":{}})"), 400,
       "response_format.json_schema.name"},
      {H, h(R"("response_format":{"type":"json_schema"})"), 400, "response_format.json_schema"},
      {H, h(R"("response_format":{"type":"json_schema","json_schema":{"name":"a"}})"), 400,
       "response_format.json_schema.schema"},
      {H,
       h(R"("response_format":{"type":"json_schema","json_schema":{"name":"a","schema":)"
         R"({"type":"array","uniqueItems":true}}})"),
       400, "response_format.json_schema.schema"},
      {H, h(R"("response_format":{"type":"xml"})"), 400, "response_format.type"},
      {H, h(R"("response_format":{})"), 400, "response_format.type"},
      {H, h(R"("chat_template_kwargs":{"fail":true})"), 400, "messages"},
      {H, h(R"("chat_template_kwargs":[])"), 400, "chat_template_kwargs"},
      {H, h(R"("continue_final_message":true)"), 400, "continue_final_message"},
      {H, h(R"("continue_final_message":true,"add_generation_prompt":true)"), 400,
       "continue_final_message"},
      {H, h(R"("add_generation_prompt":"no")"), 400, "add_generation_prompt"},
      {H, h(R"("chat_template":"{{x}}")"), 400, "chat_template"},
      {H, h(R"("parallel_tool_calls":"x")"), 400, "parallel_tool_calls"},
  };
}

TEST(FrontendParserTest, EveryErrorCaseMapsToStatusAndParam) {
  for (const ErrorCase& ec : ErrorCases()) {
    SCOPED_TRACE(ec.body);
    auto r = Parse(ec.endpoint, ec.body);
    ASSERT_FALSE(r.ok());
    ApiError e = ToApiError(r.status());
    EXPECT_EQ(e.http_status, ec.http_status) << r.status();
    ASSERT_TRUE(e.param.has_value()) << r.status();
    EXPECT_EQ(*e.param, ec.param) << r.status();
    EXPECT_FALSE(e.message.empty());
    EXPECT_TRUE(e.code.has_value());
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

TEST(FrontendParserTest, ContextErrorsUseContextLengthCode) {
  auto r = Parse(Endpoint::kCompletions, R"({"prompt":"hi","max_tokens":62})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(CodeOf(r.status()), "context_length_exceeded");
  EXPECT_NE(r.status().message().find("maximum context length is 64"),
            std::string::npos);
}

TEST(FrontendParserTest, CompletionTextPrompt) {
  auto r = Parse(Endpoint::kCompletions, R"({"model":"m","prompt":"Hi"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint, Endpoint::kCompletions);
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].ids,
            (std::vector<int32_t>{FakeTextProcessor::kBos, 'H', 'i'}));
  EXPECT_EQ(r->prompts[0].text, "Hi");
  EXPECT_EQ(r->prompts[0].max_tokens, 16);  // OpenAI's completions default
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
  EXPECT_EQ(r->sampling.logprobs, -1);
  EXPECT_EQ(r->sampling.prompt_logprobs, -1);
}

TEST(FrontendParserTest, DefaultMaxTokensClipsToContext) {
  auto r = Parse(Endpoint::kCompletions,
                 R"({"prompt":")" + std::string(55, 'x') + R"("})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompts[0].max_tokens, 64 - 56);
}

TEST(FrontendParserTest, CompletionPromptForms) {
  auto ids =
      Parse(Endpoint::kCompletions, R"({"prompt":[1,2,3],"max_tokens":4})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_EQ(ids->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ids->prompts[0].text.has_value());
  EXPECT_EQ(ids->prompts[0].max_tokens, 4);

  auto texts = Parse(Endpoint::kCompletions,
                     R"({"prompt":["a","bc"],"add_special_tokens":false})");
  ASSERT_TRUE(texts.ok()) << texts.status();
  ASSERT_EQ(texts->prompts.size(), 2u);
  EXPECT_EQ(texts->prompts[1].ids, (std::vector<int32_t>{'b', 'c'}));

  auto lists = Parse(Endpoint::kCompletions, R"({"prompt":[[5],[6,7]]})");
  ASSERT_TRUE(lists.ok()) << lists.status();
  ASSERT_EQ(lists->prompts.size(), 2u);
  EXPECT_EQ(lists->prompts[1].ids, (std::vector<int32_t>{6, 7}));

  auto integral_float =
      Parse(Endpoint::kCompletions, R"({"prompt":[7.0],"max_tokens":3.0})");
  ASSERT_TRUE(integral_float.ok()) << integral_float.status();
  EXPECT_EQ(integral_float->prompts[0].ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(integral_float->prompts[0].max_tokens, 3);
}

TEST(FrontendParserTest, AllSamplingFields) {
  auto r = Parse(Endpoint::kCompletions, R"({
    "prompt":"x","model":"m-alias","max_tokens":10,"temperature":0.5,"top_p":0.9,"top_k":40,
    "min_p":0.1,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,
    "seed":-1,"stop":"\n","include_stop_str_in_output":true,"stop_token_ids":[257,3],
    "ignore_eos":true,"skip_special_tokens":false,"min_tokens":2,
    "logit_bias":{"65":-100,"66":5.5},"logprobs":3,"echo":true,
    "return_tokens_as_token_ids":true,"stream":true,"stream_options":{"include_usage":true},
    "user":"u","n":1,"best_of":1,"some_unknown_field":{"x":[1,2]}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const SamplingOptions& s = r->sampling;
  EXPECT_EQ(r->model, "m-alias");
  EXPECT_EQ(r->prompts[0].max_tokens, 10);
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  ASSERT_TRUE(s.seed.has_value());
  EXPECT_EQ(*s.seed, ~uint64_t{0});
  EXPECT_EQ(s.stop, (std::vector<std::string>{"\n"}));
  EXPECT_TRUE(s.include_stop_str_in_output);
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{257, 3}));
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_FALSE(s.skip_special_tokens);
  EXPECT_EQ(s.min_tokens, 2);
  EXPECT_EQ(s.logit_bias.size(), 2u);
  EXPECT_FLOAT_EQ(s.logit_bias.at(65), -100.0f);
  EXPECT_FLOAT_EQ(s.logit_bias.at(66), 5.5f);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_EQ(s.logprobs, 3);
  EXPECT_EQ(s.prompt_logprobs, 3);
  EXPECT_TRUE(r->echo);
  EXPECT_TRUE(r->return_tokens_as_token_ids);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(FrontendParserTest, NullMeansDefault) {
  auto r = Parse(
      Endpoint::kCompletions,
      R"({"prompt":"x","max_tokens":null,"temperature":null,"stop":null,"n":null,
                     "logprobs":null,"model":null,"stream_options":null,"seed":null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_FALSE(r->logprobs);
  EXPECT_FALSE(r->sampling.seed.has_value());
}

TEST(FrontendParserTest, DefaultsFromGenerationConfig) {
  ParseOptions o = Options();
  o.defaults.temperature = 0.6f;
  o.defaults.top_p = 0.95f;
  auto r = Parse(Endpoint::kChat, "{" + Msgs() + R"(,"top_p":0.5})", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.5f);
}

TEST(FrontendParserTest, StopListDropsEmptyStrings) {
  auto r = Parse(Endpoint::kCompletions,
                 R"({"prompt":"x","stop":["","a","b","c","d"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sampling.stop, (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST(FrontendParserTest, ChatRendersTemplate) {
  ParseOptions o = Options();
  o.max_context = 256;
  auto r = Parse(Endpoint::kChat, R"({"messages":[
      {"role":"system","content":"S"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"tool_calls":[]},
      {"role":"tool","content":"t","tool_call_id":"c1"}],
      "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto",
      "response_format":{"type":"text"},"logprobs":true,"top_logprobs":2,
      "max_completion_tokens":5,"max_tokens":7})",
                 o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 1u);
  const std::string expected =
      "<|system|>\nS\n<|user|>\na\nb\n<|assistant|>\n\n<|tool|>\nt\n<|tools|>"
      "1\n<|assistant|>\n";
  EXPECT_EQ(r->prompts[0].text, expected);
  EXPECT_EQ(r->prompts[0].ids.size(), expected.size());  // no BOS for chat
  EXPECT_EQ(r->prompts[0].max_tokens, 5);  // max_completion_tokens wins
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 2);
  EXPECT_EQ(r->sampling.logprobs, 2);
  EXPECT_EQ(r->sampling.prompt_logprobs, -1);
  EXPECT_FALSE(r->sampling.json_object);  // "text"
}

TEST(FrontendParserTest, ChatJsonObjectResponseFormatTurnsJsonModeOn) {
  auto r = Parse(Endpoint::kChat, "{" + Msgs() + R"(,"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sampling.json_object);
  r = Parse(Endpoint::kChat, "{" + Msgs() + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sampling.json_object);
}

// json_schema: the schema is compiled as the request is read, on both
// endpoints; json_object and json_schema are exclusive by construction.
TEST(FrontendParserTest, JsonSchemaResponseFormatCompilesTheSchema) {
  const std::string format =
      R"("response_format":{"type":"json_schema","json_schema":{"name":"city","strict":true,)"
      R"("schema":{"type":"object","properties":{"name":{"type":"string"}}}}})";
  auto r = Parse(Endpoint::kChat, "{" + Msgs() + "," + format + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(r->sampling.json_schema, nullptr);
  EXPECT_FALSE(r->sampling.json_object);
  EXPECT_EQ(r->sampling.json_schema->node(r->sampling.json_schema->root()).kind,
            structured::SchemaNode::Kind::kObject);
  r = Parse(Endpoint::kCompletions, R"({"prompt":"a",)" + format + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->sampling.json_schema, nullptr);
  r = Parse(Endpoint::kCompletions, R"({"prompt":"a","response_format":{"type":"json_object"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sampling.json_object);
  EXPECT_EQ(r->sampling.json_schema, nullptr);
}

// vLLM's own fields: structured_outputs {"json" | "choice" | "json_object"}
// and the older guided_json and guided_choice; one constraint at most.
TEST(FrontendParserTest, VllmStructuredOutputFields) {
  auto Accepts = [](const std::string& fields, const std::string& text) {
    auto r = Parse(Endpoint::kCompletions, R"({"prompt":"a",)" + fields + "}");
    EXPECT_TRUE(r.ok()) << fields << ": " << r.status();
    if (!r.ok() || r->sampling.json_schema == nullptr) return false;
    structured::SchemaGrammar g(r->sampling.json_schema.get());
    return g.Feed(text) && g.IsComplete();
  };
  EXPECT_TRUE(Accepts(R"("guided_choice":["yes","no"])", "no"));
  EXPECT_FALSE(Accepts(R"("guided_choice":["yes","no"])", "\"no\""));
  EXPECT_FALSE(Accepts(R"("guided_choice":["yes","no"])", " no"));
  EXPECT_TRUE(Accepts(R"("structured_outputs":{"choice":["a b","a"]})", "a b"));
  EXPECT_TRUE(Accepts(R"("guided_json":{"type":"integer"})", "42"));
  EXPECT_TRUE(Accepts(R"("guided_json":"{\"type\":\"integer\"}")", "42"));
  EXPECT_TRUE(Accepts(R"("structured_outputs":{"json":{"type":"array"}})", "[1]"));
  EXPECT_FALSE(Accepts(R"("structured_outputs":{"json":{"type":"array"}})", "{}"));
  auto r =
      Parse(Endpoint::kCompletions,
            R"({"prompt":"a","structured_outputs":{"json_object":true,"disable_fallback":true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sampling.json_object);

  auto Error = [](const std::string& fields) {
    auto r = Parse(Endpoint::kCompletions, R"({"prompt":"a",)" + fields + "}");
    return r.ok() ? std::string("ok") : std::string(ParamOf(r.status()).value_or(""));
  };
  EXPECT_EQ(Error(R"("guided_choice":[])"), "guided_choice");
  EXPECT_EQ(Error(R"("guided_choice":["a",""])"), "guided_choice");
  EXPECT_EQ(Error(R"("guided_choice":["a",1])"), "guided_choice");
  EXPECT_EQ(Error(R"("guided_json":"{")"), "guided_json");
  EXPECT_EQ(Error(R"("guided_json":{"type":"string","format":"uri-reference"})"), "guided_json");
  EXPECT_EQ(Error(R"("guided_regex":"a+")"), "guided_regex");
  EXPECT_EQ(Error(R"("structured_outputs":{"regex":"a+"})"), "structured_outputs.regex");
  EXPECT_EQ(Error(R"("structured_outputs":{"json":{},"choice":["a"]})"), "structured_outputs");
  EXPECT_EQ(Error(R"("guided_json":{},"response_format":{"type":"json_object"})"), "guided_json");
  EXPECT_EQ(Error(R"("guided_json":{},"response_format":{"type":"text"})"), "ok");
}

// A schema's properties are written in the order the request declares
// them, not by name (the body is parsed with its keys sorted, and the
// schema read again from its text): in response_format, guided_json,
// structured_outputs and the tools' parameters. A body without its text
// (built in code) declares them by name.
TEST(FrontendParserTest, SchemaPropertiesFollowTheOrderWritten) {
  const std::string schema =
      R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},)"
      R"("required":["zeta","alpha"]})";
  const std::string in_order = R"({"zeta":1,"alpha":2})";
  const std::string by_name = R"({"alpha":2,"zeta":1})";
  auto Holds = [](const absl::StatusOr<ParsedRequest>& r, const std::string& text) {
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->sampling.json_schema == nullptr) return false;
    structured::SchemaGrammar g(r->sampling.json_schema.get());
    return g.Feed(text) && g.IsComplete();
  };
  for (const std::string& field :
       {R"("response_format":{"type":"json_schema","json_schema":{"name":"a","schema":)" + schema +
            "}}",
        R"("guided_json":)" + schema, R"("structured_outputs":{"json":)" + schema + "}",
        R"("guided_json":)" + nlohmann::json(schema).dump()}) {
    auto r = Parse(Endpoint::kCompletions, R"({"prompt":"a",)" + field + "}");
    EXPECT_TRUE(Holds(r, in_order)) << field;
    EXPECT_FALSE(Holds(r, by_name)) << field;
  }
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"f","parameters":)" +
                            schema + R"(}}],"tool_choice":"required")";
  auto r = Parse(Endpoint::kChat, "{" + Msgs() + "," + tools + "}");
  EXPECT_TRUE(Holds(r, R"([{"name":"f","parameters":)" + in_order + "}]"));
  EXPECT_FALSE(Holds(r, R"([{"name":"f","parameters":)" + by_name + "}]"));
  // Without the text: by name.
  static const FakeTextProcessor tp;
  auto j = ParseRequestBody(R"({"prompt":"a","guided_json":)" + schema + "}");
  ASSERT_TRUE(j.ok());
  r = ParseCompletionRequest(*j, Options(), tp);
  EXPECT_TRUE(Holds(r, by_name));
  EXPECT_FALSE(Holds(r, in_order));
}

// tool_choice "required" or a named function: the answer is held to a list
// of calls of the tools offered (one call when named), whatever
// --tool-call-parser says, and parsed as the calls.
TEST(FrontendParserTest, ForcedToolChoiceHoldsTheAnswerToCalls) {
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":)"
      R"({"type":"object","properties":{"city":{"$ref":"#/$defs/city"}},"required":["city"],)"
      R"("$defs":{"city":{"type":"string"}}}}},)"
      R"({"type":"function","function":{"name":"now"}}])";
  auto Calls = [&](const std::string& choice, const std::string& text) {
    auto r =
        Parse(Endpoint::kChat, "{" + Msgs() + "," + tools + ",\"tool_choice\":" + choice + "}");
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return false;
    EXPECT_EQ(r->tool_call_parser, ToolCallParser::kForced);
    structured::SchemaGrammar g(r->sampling.json_schema.get());
    return g.Feed(text) && g.IsComplete();
  };
  const std::string weather = R"({"name":"get_weather","parameters":{"city":"Paris"}})";
  const std::string now = R"({"name":"now","parameters":{}})";
  EXPECT_TRUE(Calls(R"("required")", "[" + weather + "]"));
  EXPECT_TRUE(Calls(R"("required")", "[" + weather + "," + now + "]"));
  EXPECT_FALSE(Calls(R"("required")", "[]"));
  EXPECT_FALSE(Calls(R"("required")", R"([{"name":"get_weather","parameters":{"city":1}}])"));
  EXPECT_FALSE(Calls(R"("required")", R"([{"name":"other","parameters":{}}])"));
  // The name comes first.
  EXPECT_FALSE(Calls(R"("required")", R"([{"parameters":{},"name":"now"}])"));
  const std::string named = R"({"type":"function","function":{"name":"get_weather"}})";
  EXPECT_TRUE(Calls(named, "[" + weather + "]"));
  EXPECT_FALSE(Calls(named, "[" + now + "]"));
  EXPECT_FALSE(Calls(named, "[" + weather + "," + weather + "]"));

  // Many tools: every one of them can be called (the recognizer follows all
  // the alternatives at once), and past the limit the request is refused.
  auto ManyTools = [](int n) {
    nlohmann::json list = nlohmann::json::array();
    for (int i = 0; i < n; ++i) {
      list.push_back({{"type", "function"},
                      {"function",
                       {{"name", "t" + std::to_string(i)}, {"parameters", {{"type", "object"}}}}}});
    }
    return "\"tools\":" + list.dump() + ",\"tool_choice\":\"required\"";
  };
  auto many = Parse(Endpoint::kChat, "{" + Msgs() + "," + ManyTools(100) + "}");
  ASSERT_TRUE(many.ok()) << many.status();
  for (const char* call :
       {R"([{"name":"t99","parameters":{}}])",
        R"([{"name":"t0","parameters":{"x":1}},{"name":"t57","parameters":{}}])"}) {
    structured::SchemaGrammar g(many->sampling.json_schema.get());
    EXPECT_TRUE(g.Feed(call) && g.IsComplete()) << call;
  }
  auto too_many = Parse(Endpoint::kChat, "{" + Msgs() + "," + ManyTools(129) + "}");
  EXPECT_FALSE(too_many.ok());

  auto Error = [&](const std::string& fields) {
    auto r = Parse(Endpoint::kChat, "{" + Msgs() + "," + fields + "}");
    return r.ok() ? std::string("ok") : std::string(ParamOf(r.status()).value_or(""));
  };
  EXPECT_EQ(Error(tools + R"(,"tool_choice":{"type":"function","function":{"name":"x"}})"),
            "tool_choice");
  EXPECT_EQ(Error(R"("tools":[{"type":"function","function":{"name":"f","parameters":)"
                  R"({"type":"string","format":"idn-email"}}}],"tool_choice":"required")"),
            "tools[0].function.parameters");
  EXPECT_EQ(Error(tools + R"(,"tool_choice":"required","response_format":{"type":"json_object"})"),
            "tool_choice");
  EXPECT_EQ(Error(R"("tool_choice":"required")"), "tool_choice");
  EXPECT_EQ(Error(tools + R"(,"tool_choice":"auto")"), "ok");
}

TEST(FrontendParserTest, ChatDefaultMaxTokensIsRestOfContext) {
  auto r = Parse(Endpoint::kChat, "{" + Msgs() + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t len = static_cast<int64_t>(r->prompts[0].ids.size());
  EXPECT_EQ(r->prompts[0].max_tokens, 64 - len);
  EXPECT_FALSE(r->logprobs);
  EXPECT_EQ(r->sampling.logprobs, -1);
}

TEST(FrontendParserTest, ChatLogprobsWithoutTopIsZeroAlternatives) {
  auto r = Parse(Endpoint::kChat, "{" + Msgs() + R"(,"logprobs":true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->sampling.logprobs, 0);
}

TEST(FrontendParserTest, ChatToolChoiceNoneDropsTools) {
  auto r = Parse(
      Endpoint::kChat,
      "{" + Msgs() + R"(,"tools":[{"type":"function"}],"tool_choice":"none"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompts[0].text->find("<|tools|>"), std::string::npos);
}

// The parser is on only for requests that offer tools; mistral's, keyed on
// the special token [TOOL_CALLS], then decodes with special tokens, whatever
// the request says (as vLLM does).
TEST(FrontendParserTest, ToolCallParserOnlyWithTools) {
  const std::string tools = R"(,"tools":[{"type":"function","function":{"name":"f"}}])";
  for (ToolCallParser parser :
       {ToolCallParser::kHermes, ToolCallParser::kMistral, ToolCallParser::kLlama3Json}) {
    ParseOptions o = Options();
    o.tool_call_parser = parser;
    const bool mistral = parser == ToolCallParser::kMistral;
    for (const std::string& extra :
         {tools, tools + R"(,"skip_special_tokens":true)", tools + R"(,"tool_choice":"none")",
          std::string(), std::string(R"(,"tools":[])")}) {
      auto r = Parse(Endpoint::kChat, "{" + Msgs() + extra + "}", o);
      ASSERT_TRUE(r.ok()) << r.status();
      const bool with_tools = extra.rfind(tools, 0) == 0 && extra.find("none") == std::string::npos;
      EXPECT_EQ(r->tool_call_parser, with_tools ? parser : ToolCallParser::kNone) << extra;
      EXPECT_EQ(r->sampling.skip_special_tokens, !(with_tools && mistral)) << extra;
    }
  }
}

TEST(FrontendParserTest, ContinueFinalMessage) {
  auto r = Parse(Endpoint::kChat, R"({"messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":"partial"}],"continue_final_message":true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompts[0].text, "<|user|>\nq\n<|assistant|>\npartial\n");
}

TEST(FrontendParserTest, ToGenerationRequests) {
  auto r = Parse(Endpoint::kCompletions,
                 R"({"prompt":[[1],[2,3]],"max_tokens":4,"seed":7})");
  ASSERT_TRUE(r.ok()) << r.status();
  auto arrival = std::chrono::steady_clock::now();
  auto reqs = ToGenerationRequests(*r, "cmpl-x", arrival);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].request_id, "cmpl-x-0");
  EXPECT_EQ(reqs[1].request_id, "cmpl-x-1");
  EXPECT_EQ(reqs[1].prompt_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(reqs[1].sampling.max_tokens, 4);
  EXPECT_EQ(reqs[1].sampling.seed, 7u);
  EXPECT_EQ(reqs[1].arrival_time, arrival);
}

TEST(FrontendApiErrorTest, StatusMapping) {
  EXPECT_EQ(ToApiError(absl::InvalidArgumentError("x")).http_status, 400);
  EXPECT_EQ(ToApiError(absl::UnauthenticatedError("x")).http_status, 401);
  EXPECT_EQ(ToApiError(absl::NotFoundError("x")).http_status, 404);
  EXPECT_EQ(ToApiError(absl::ResourceExhaustedError("x")).http_status, 503);
  EXPECT_EQ(ToApiError(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ToApiError(absl::InternalError("x")).http_status, 500);
  EXPECT_TRUE(IsOverload(absl::ResourceExhaustedError("x")));
  EXPECT_FALSE(IsOverload(absl::InvalidArgumentError("x")));
}

TEST(FrontendApiErrorTest, BodyShape) {
  ApiError e = ToApiError(InvalidParam("top_p", "bad top_p"));
  EXPECT_EQ(
      ErrorBody(e),
      R"({"error":{"message":"bad top_p","type":"invalid_request_error","param":"top_p",)"
      R"("code":"invalid_value"}})");
  ApiError internal = ToApiError(absl::InternalError("boom \xff"));
  EXPECT_EQ(
      ErrorBody(internal),
      "{\"error\":{\"message\":\"boom \xEF\xBF\xBD\",\"type\":\"server_error\","
      "\"param\":null,\"code\":\"internal_error\"}}");
}

}  // namespace
}  // namespace tandem::frontend
