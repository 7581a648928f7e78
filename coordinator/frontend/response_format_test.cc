// Goldens of the response formats: non-streaming bodies of both endpoints,
// log-prob formats, and the SSE framing of streams.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/response_builder.h"
#include "coordinator/frontend/response_common.h"
#include "coordinator/frontend/sse_stream.h"
#include "coordinator/frontend/testing/fake_text_processor.h"

namespace tandem::frontend {
namespace {

using testing::FakeTextProcessor;

ResponseContext Ctx(Endpoint ep) {
  ResponseContext c;
  c.endpoint = ep;
  c.id = ep == Endpoint::kChat ? "chatcmpl-1" : "cmpl-1";
  c.created = 100;
  c.model = "m";
  return c;
}

PromptInput Prompt(std::vector<int32_t> ids, std::optional<std::string> text) {
  PromptInput p;
  p.ids = std::move(ids);
  p.text = std::move(text);
  return p;
}

GenerationEvent Tokens(std::vector<int32_t> ids, std::string text) {
  GenerationEvent e;
  e.token_ids = std::move(ids);
  e.text = std::move(text);
  return e;
}

GenerationEvent Finish(GenerationEvent e, FinishReason r) {
  e.finished = true;
  e.finish_reason = r;
  return e;
}

TokenLogprob Lp(int32_t id, float lp,
                std::vector<std::pair<int32_t, float>> top = {}) {
  TokenLogprob t;
  t.id = id;
  t.logprob = lp;
  t.top = std::move(top);
  return t;
}

const FakeTextProcessor kText;

TEST(FrontendResponseTest, CompletionGolden) {
  ResponseContext ctx = Ctx(Endpoint::kCompletions);
  std::vector<PromptInput> prompts = {Prompt({256, 'H', 'i'}, "Hi")};
  ResponseBuilder b(ctx, prompts, kText);
  b.Add(0, Tokens({'A'}, "A"));
  EXPECT_FALSE(b.AllFinished());
  GenerationEvent last = Finish(Tokens({'B', 257}, "B"), FinishReason::kStop);
  last.stop_token_id = 257;
  b.Add(0, last);
  ASSERT_TRUE(b.AllFinished());
  EXPECT_EQ(
      b.Json(),
      R"({"id":"cmpl-1","object":"text_completion","created":100,"model":"m",)"
      R"("choices":[{"index":0,"text":"AB","logprobs":null,"finish_reason":"stop",)"
      R"("stop_reason":257}],)"
      R"("usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}})");
}

TEST(FrontendResponseTest, CompletionEchoLogprobsGolden) {
  ResponseContext ctx = Ctx(Endpoint::kCompletions);
  ctx.echo = true;
  ctx.logprobs = true;
  ctx.top_logprobs = 1;
  std::vector<PromptInput> prompts = {Prompt({'H', 'i'}, "Hi")};
  ResponseBuilder b(ctx, prompts, kText);
  GenerationEvent e = Finish(Tokens({'!'}, "!"), FinishReason::kLength);
  e.prompt_logprobs = {Lp('H', std::numeric_limits<float>::quiet_NaN()),
                       Lp('i', -1.0f, {{'i', -1.0f}, {'j', -1.5f}})};
  e.logprobs = {Lp('!', -0.25f, {{'?', -0.125f}, {'!', -0.25f}})};
  b.Add(0, e);
  EXPECT_EQ(
      b.Json(),
      R"({"id":"cmpl-1","object":"text_completion","created":100,"model":"m",)"
      R"("choices":[{"index":0,"text":"Hi!","logprobs":{"text_offset":[0,1,2],)"
      R"("token_logprobs":[null,-1.0,-0.25],"tokens":["H","i","!"],)"
      R"("top_logprobs":[null,{"i":-1.0},{"?":-0.125,"!":-0.25}]},)"
      R"("finish_reason":"length","stop_reason":null}],)"
      R"("usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}})");
}

TEST(FrontendResponseTest, EchoOfTokenIdPromptIsDecoded) {
  ResponseContext ctx = Ctx(Endpoint::kCompletions);
  ctx.echo = true;
  std::vector<PromptInput> prompts = {Prompt({'o', 'k'}, std::nullopt)};
  ResponseBuilder b(ctx, prompts, kText);
  b.Add(0, Finish(Tokens({'.'}, "."), FinishReason::kLength));
  EXPECT_NE(b.Json().find(R"("text":"ok.")"), std::string::npos) << b.Json();
}

TEST(FrontendResponseTest, ChatGoldenWithLogprobsAndPartialUtf8) {
  ResponseContext ctx = Ctx(Endpoint::kChat);
  ctx.logprobs = true;
  ctx.top_logprobs = 2;
  std::vector<PromptInput> prompts = {Prompt({'q'}, "q")};
  ResponseBuilder b(ctx, prompts, kText);
  GenerationEvent e =
      Tokens({0xE4, 0xBD, 0xA0}, "\xE4\xBD\xA0");  // 你 over three tokens
  e.logprobs = {Lp(0xE4, -0.5f, {{0xE4, -0.5f}, {'a', -2.0f}, {'b', -3.0f}}),
                Lp(0xBD, 0.0f), Lp(0xA0, 0.0f)};
  b.Add(0, Finish(e, FinishReason::kStop));
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(
      b.Json(),
      R"({"id":"chatcmpl-1","object":"chat.completion","created":100,"model":"m",)"
      R"("choices":[{"index":0,"message":{"role":"assistant","content":")"
      "\xE4\xBD\xA0"
      R"("},"logprobs":{"content":[)"
      R"({"token":")" +
          r +
          R"(","logprob":-0.5,"bytes":[228],"top_logprobs":[)"
          R"({"token":")" +
          r +
          R"(","logprob":-0.5,"bytes":[228]},)"
          R"({"token":"a","logprob":-2.0,"bytes":[97]}]},)"
          R"({"token":")" +
          r +
          R"(","logprob":0.0,"bytes":[189],"top_logprobs":[]},)"
          R"({"token":")" +
          r +
          R"(","logprob":0.0,"bytes":[160],"top_logprobs":[]}]},)"
          R"("finish_reason":"stop","stop_reason":null}],)"
          R"("usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}})");
}

TEST(FrontendResponseTest, TokensAsTokenIds) {
  ResponseContext ctx = Ctx(Endpoint::kChat);
  ctx.logprobs = true;
  ctx.top_logprobs = 1;
  ctx.as_token_ids = true;
  std::vector<PromptInput> prompts = {Prompt({'q'}, "q")};
  ResponseBuilder b(ctx, prompts, kText);
  GenerationEvent e = Tokens({'H'}, "H");
  e.logprobs = {Lp('H', -0.25f, {{'I', -0.5f}})};
  b.Add(0, Finish(e, FinishReason::kLength));
  const std::string json = b.Json();
  EXPECT_NE(
      json.find(R"({"token":"token_id:72","logprob":-0.25,)"
                R"("bytes":[116,111,107,101,110,95,105,100,58,55,50],)"
                R"("top_logprobs":[{"token":"token_id:73","logprob":-0.5,)"),
      std::string::npos)
      << json;

  ResponseContext cctx = Ctx(Endpoint::kCompletions);
  cctx.logprobs = true;
  cctx.top_logprobs = 1;
  cctx.as_token_ids = true;
  ResponseBuilder cb(cctx, prompts, kText);
  cb.Add(0, Finish(e, FinishReason::kLength));
  EXPECT_NE(
      cb.Json().find(
          R"("tokens":["token_id:72"],"top_logprobs":[{"token_id:73":-0.5,)"
          R"("token_id:72":-0.25}])"),
      std::string::npos)
      << cb.Json();
}

TEST(FrontendSseTest, ChatStreamGolden) {
  ResponseContext ctx = Ctx(Endpoint::kChat);
  ctx.include_usage = true;
  std::vector<PromptInput> prompts = {Prompt({'q', 'q'}, "qq")};
  SseStream s(ctx, prompts, kText);
  const std::string head =
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":100,"model":"m",)";
  EXPECT_EQ(
      s.Start(),
      "data: " + head +
          R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},)"
          R"("logprobs":null,"finish_reason":null}],"usage":null})"
          "\n\n");
  EXPECT_EQ(
      s.Event(0, Tokens({'A'}, "A")),
      "data: " + head +
          R"("choices":[{"index":0,"delta":{"content":"A"},"logprobs":null,)"
          R"("finish_reason":null,"stop_reason":null}],"usage":null})"
          "\n\n");
  EXPECT_EQ(s.Event(0, Tokens({0xE4}, "")), "");  // text held back: no chunk
  GenerationEvent fin = Finish(Tokens({}, ""), FinishReason::kStop);
  fin.stop_string = "\n";
  EXPECT_EQ(s.Event(0, fin),
            "data: " + head +
                R"("choices":[{"index":0,"delta":{},"logprobs":null,)"
                R"("finish_reason":"stop","stop_reason":"\n"}],"usage":null})"
                "\n\n");
  EXPECT_TRUE(s.AllFinished());
  EXPECT_EQ(s.Event(0, Tokens({'Z'}, "Z")), "");  // nothing after the finish
  EXPECT_EQ(
      s.End(),
      "data: " + head +
          R"("choices":[],"usage":{"prompt_tokens":2,"completion_tokens":2,)"
          R"("total_tokens":4}})"
          "\n\ndata: [DONE]\n\n");
}

TEST(FrontendSseTest, CompletionStreamWithEchoAndLogprobs) {
  ResponseContext ctx = Ctx(Endpoint::kCompletions);
  ctx.echo = true;
  ctx.logprobs = true;
  ctx.top_logprobs = 0;
  std::vector<PromptInput> prompts = {Prompt({'H', 'i'}, "Hi")};
  SseStream s(ctx, prompts, kText);
  EXPECT_EQ(s.Start(), "");
  GenerationEvent e = Tokens({'!'}, "!");
  e.prompt_logprobs = {Lp('H', std::nanf("")), Lp('i', -1.0f)};
  e.logprobs = {Lp('!', -0.25f)};
  const std::string head =
      R"(data: {"id":"cmpl-1","object":"text_completion","created":100,"model":"m",)";
  EXPECT_EQ(s.Event(0, e),
            head +
                R"("choices":[{"index":0,"text":"Hi!","logprobs":{)"
                R"("text_offset":[0,1,2],"token_logprobs":[null,-1.0,-0.25],)"
                R"("tokens":["H","i","!"],"top_logprobs":[null,{"i":-1.0},)"
                R"({"!":-0.25}]},"finish_reason":null,"stop_reason":null}]})"
                "\n\n");
  GenerationEvent e2 = Finish(Tokens({'?'}, "?"), FinishReason::kLength);
  e2.logprobs = {Lp('?', -2.0f)};
  EXPECT_EQ(s.Event(0, e2),
            head +
                R"("choices":[{"index":0,"text":"?","logprobs":{)"
                R"("text_offset":[3],"token_logprobs":[-2.0],"tokens":["?"],)"
                R"("top_logprobs":[{"?":-2.0}]},"finish_reason":"length",)"
                R"("stop_reason":null}]})"
                "\n\n");
  EXPECT_EQ(s.End(), "data: [DONE]\n\n");  // no usage chunk unless asked
  EXPECT_EQ(s.usage().completion_tokens, 2);
}

TEST(FrontendSseTest, SeveralChoicesKeepTheirIndex) {
  ResponseContext ctx = Ctx(Endpoint::kCompletions);
  std::vector<PromptInput> prompts = {Prompt({'a'}, "a"),
                                      Prompt({'b', 'c'}, "bc")};
  SseStream s(ctx, prompts, kText);
  EXPECT_NE(s.Event(1, Tokens({'x'}, "x")).find(R"("index":1,"text":"x")"),
            std::string::npos);
  EXPECT_NE(
      s.Event(0, Finish(Tokens({'y'}, "y"), FinishReason::kLength))
          .find(
              R"("index":0,"text":"y","logprobs":null,"finish_reason":"length")"),
      std::string::npos);
  EXPECT_FALSE(s.AllFinished());
  s.Event(1, Finish(Tokens({}, ""), FinishReason::kStop));
  EXPECT_TRUE(s.AllFinished());
  EXPECT_EQ(s.usage().prompt_tokens, 3);
  EXPECT_EQ(s.usage().completion_tokens, 2);
}

TEST(FrontendSseTest, ErrorFrame) {
  EXPECT_EQ(
      SseStream::ErrorFrame(ToApiError(absl::UnavailableError("worker lost"))),
      R"(data: {"error":{"message":"worker lost","type":"server_error","param":null,)"
      R"("code":"overloaded"}})"
      "\n\n");
}

TEST(FrontendResponseCommonTest, Utf8Helpers) {
  EXPECT_EQ(SanitizeUtf8("a\xE4\xBD\xA0z"), "a\xE4\xBD\xA0z");
  EXPECT_EQ(Utf8Length("a\xE4\xBD\xA0z"), 3);
  EXPECT_EQ(SanitizeUtf8("\xE4\xBD"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(Utf8Length("\xED\xA0\x80"), 3);                         // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80").size(), 12u);  // > U+10FFFF
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");  // emoji
}

TEST(FrontendResponseCommonTest, LogprobValue) {
  EXPECT_TRUE(LogprobValue(std::nanf("")).is_null());
  EXPECT_EQ(LogprobValue(-std::numeric_limits<float>::infinity()), -9999.0);
  EXPECT_EQ(LogprobValue(-1e6f), -9999.0);
  EXPECT_EQ(LogprobValue(-0.5f), -0.5);
}

}  // namespace
}  // namespace tandem::frontend
