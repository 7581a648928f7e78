// /tokenize and /detokenize on the byte-level fake text processor: the
// answers' fields, vLLM's defaults for special tokens, the chat prompt as
// /v1/chat/completions renders it, and every rejection with its param.
#include "coordinator/frontend/tokenize_endpoints.h"

#include <string>

#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/json_fields.h"
#include "coordinator/frontend/testing/fake_text_processor.h"
#include "gtest/gtest.h"

namespace tandem::frontend {
namespace {

using nlohmann::json;
using testing::FakeTextProcessor;

ParseOptions Options() {
  ParseOptions o;
  o.served_model_names = {"m"};
  o.max_context = 64;
  o.vocab_size = FakeTextProcessor::kVocab;
  return o;
}

absl::StatusOr<json> Call(const std::string& body, bool detokenize = false) {
  static const FakeTextProcessor tp;
  auto j = ParseRequestBody(body);
  if (!j.ok()) return j.status();
  auto out =
      detokenize ? DetokenizeResponse(*j, Options(), tp) : TokenizeResponse(*j, Options(), tp);
  if (!out.ok()) return out.status();
  return json::parse(*out);
}

TEST(TokenizeEndpoints, TextPromptGetsTheModelsBosByDefault) {
  auto r = Call(R"({"model":"m","prompt":"hi"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dump(),
            R"({"count":3,"max_model_len":64,"token_strs":null,"tokens":[256,104,105]})");
  r = Call(R"({"prompt":"hi","add_special_tokens":false,"return_token_strs":true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["tokens"], json::parse("[104,105]"));
  EXPECT_EQ((*r)["token_strs"], json::parse(R"(["h","i"])"));
}

TEST(TokenizeEndpoints, ChatPromptIsRenderedAsForChatCompletions) {
  auto r = Call(R"({"messages":[{"role":"user","content":"a"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string want = "<|user|>\na\n<|assistant|>\n";  // no BOS: the template's own
  ASSERT_EQ((*r)["count"], want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*r)["tokens"][i], static_cast<unsigned char>(want[i]));
  }
  r = Call(R"({"messages":[{"role":"user","content":"a"}],"add_generation_prompt":false})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["count"], std::string("<|user|>\na\n").size());
}

TEST(TokenizeEndpoints, ApplyTemplateGivesTheChatPromptText) {
  static const FakeTextProcessor tp;
  auto body = ParseRequestBody(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"}]})");
  ASSERT_TRUE(body.ok());
  auto r = ApplyTemplateResponse(*body, Options(), tp);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, R"({"prompt":"<|system|>\ns\n<|user|>\na\n<|assistant|>\n"})");
  body = ParseRequestBody(R"({"messages":"hi"})");
  ASSERT_TRUE(body.ok());
  r = ApplyTemplateResponse(*body, Options(), tp);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ToApiError(r.status()).param.value_or(""), "messages");
}

TEST(TokenizeEndpoints, DetokenizeInvertsTokenize) {
  auto r = Call(R"({"tokens":[256,104,105]})", /*detokenize=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dump(), R"({"prompt":"<bos>hi"})");
  r = Call(R"({"tokens":[]})", /*detokenize=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["prompt"], "");
}

TEST(TokenizeEndpoints, RejectionsNameTheirParam) {
  struct Case {
    std::string body;
    bool detokenize;
    int http_status;
    std::string param;
  };
  for (const Case& c : std::vector<Case>{
           {R"([1])", false, 400, "body"},
           {R"({})", false, 400, "messages"},
           {R"({"prompt":"a","messages":[{"role":"user","content":"a"}]})", false, 400, "prompt"},
           {R"({"prompt":5})", false, 400, "prompt"},
           {R"({"prompt":"a","model":"other"})", false, 404, "model"},
           {R"({"prompt":"a","add_special_tokens":"yes"})", false, 400, "add_special_tokens"},
           {R"({"messages":[]})", false, 400, "messages"},
           {R"({"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"fail":true}})",
            false, 400, "messages"},
           {R"({})", true, 400, "tokens"},
           {R"({"tokens":"1 2"})", true, 400, "tokens"},
           {R"({"tokens":[1,260]})", true, 400, "tokens[1]"},
           {R"({"tokens":[-1]})", true, 400, "tokens[0]"},
           {R"({"tokens":[1],"model":"other"})", true, 404, "model"},
       }) {
    auto r = Call(c.body, c.detokenize);
    ASSERT_FALSE(r.ok()) << c.body;
    const ApiError e = ToApiError(r.status());
    EXPECT_EQ(e.http_status, c.http_status) << c.body << ": " << r.status();
    EXPECT_EQ(e.param.value_or(""), c.param) << c.body << ": " << r.status();
  }
}

}  // namespace
}  // namespace tandem::frontend
