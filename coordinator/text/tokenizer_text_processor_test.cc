#include "coordinator/text/tokenizer_text_processor.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

std::shared_ptr<const Tokenizer> Llama2() {
  const std::string dir = std::string(TANDEM_TESTDATA_DIR) + "/tokenizers/llama2/";
  auto t = Tokenizer::FromHfFiles(dir + "tokenizer.json", dir + "tokenizer_config.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return std::shared_ptr<const Tokenizer>(std::move(*t));
}

std::string ReadTemplate(const std::string& name) {
  std::ifstream f(std::string(TANDEM_TESTDATA_DIR) + "/chat_templates/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TokenizerTextProcessor, RendersTheModelsChatTemplate) {
  const std::string tmpl = ReadTemplate("llama2.jinja");
  ASSERT_FALSE(tmpl.empty());
  auto tp = TokenizerTextProcessor::Create(Llama2(), tmpl);
  ASSERT_TRUE(tp.ok()) << tp.status();
  nlohmann::json messages = nlohmann::json::array(
      {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello"}},
       {{"role", "user"}, {"content", "Bye"}}});
  auto text = (*tp)->ApplyChatTemplate(messages, {});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("[INST] Hi [/INST]"), std::string::npos) << *text;
  EXPECT_EQ(*text, "<s>[INST] Hi [/INST] Hello </s><s>[INST] Bye [/INST]");
  // The template's own raise_exception becomes a 400-style error.
  nlohmann::json bad = nlohmann::json::array(
      {{{"role", "assistant"}, {"content", "x"}}, {{"role", "assistant"}, {"content", "y"}}});
  EXPECT_EQ((*tp)->ApplyChatTemplate(bad, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*tp)->ApplyChatTemplate(nlohmann::json::object(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerTextProcessor, EncodeDecodeAndTokenBytes) {
  auto tp = TokenizerTextProcessor::Create(Llama2());
  ASSERT_TRUE(tp.ok());
  auto ids = (*tp)->Encode("héllo wörld", /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  auto text = (*tp)->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "héllo wörld");
  std::string joined;
  for (int32_t id : *ids) joined += (*tp)->TokenText(id);
  EXPECT_EQ(joined, " héllo wörld");  // SentencePiece's leading space is part of the bytes
  EXPECT_FALSE((*tp)->Decode({-1}).ok());
}

TEST(TokenizerTextProcessor, NoTemplateMeansAClearChatError) {
  auto tp = TokenizerTextProcessor::Create(Llama2(), "");  // its config has no template
  ASSERT_TRUE(tp.ok());
  EXPECT_EQ((*tp)->ApplyChatTemplate(nlohmann::json::array({{{"role", "user"}, {"content", "a"}}}),
                                     {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto custom = TokenizerTextProcessor::Create(Llama2(), "{% for m in messages %}<{{ m.content }}>{% endfor %}");
  ASSERT_TRUE(custom.ok());
  auto r = (*custom)->ApplyChatTemplate(nlohmann::json::array({{{"role", "user"}, {"content", "a"}}}), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<a>");
  EXPECT_FALSE(TokenizerTextProcessor::Create(Llama2(), "{% if %}").ok());
}

}  // namespace
}  // namespace tandem
