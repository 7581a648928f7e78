// Loading errors, and tokenizer.json features the real fixtures do not use
// (lstrip/rstrip/single_word/normalized added tokens, EOS in the template,
// chat_template lists), on a hand-made tokenizer.json.
#include <fstream>
#include <string>

#include "common/tokenizer/testing/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Characters and a few merges; <unk>; added tokens with every flag.
constexpr char kTiny[] = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 13, "content": "<eos>", "special": true},
    {"id": 14, "content": "[L]", "special": true, "lstrip": true},
    {"id": 15, "content": "[R]", "special": true, "rstrip": true},
    {"id": 16, "content": "yo", "special": false, "single_word": true, "normalized": false},
    {"id": 17, "content": "HI", "special": false, "normalized": true},
    {"id": 18, "content": "<bos>", "special": true}
  ],
  "normalizer": {"type": "Lowercase"},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"<bos>": {"id": "<bos>", "ids": [18], "tokens": ["<bos>"]},
                       "<eos>": {"id": "<eos>", "ids": [13], "tokens": ["<eos>"]}}},
  "decoder": null,
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": false, "byte_fallback": false,
    "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, " ": 4, "he": 5, "ll": 6, "hell": 7, "hello": 8,
              "<unk>": 9, "w": 10, "r": 11, "d": 12},
    "merges": ["h e", "l l", ["he", "ll"], "hell o"]}
})";

std::unique_ptr<Tokenizer> Tiny(const std::string& config = "") {
  auto t = Tokenizer::FromHfJson(kTiny, config);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(TokenizerFeaturesTest, AddedTokenFlags) {
  auto t = Tiny();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 19);
  EXPECT_EQ(t->bos_id(), 18);
  EXPECT_TRUE(t->adds_bos());
  EXPECT_THAT(t->Encode("hello"), ElementsAre(18, 8, 13));
  EXPECT_THAT(t->Encode("hello", false), ElementsAre(8));
  // lstrip swallows the spaces before [L]; rstrip the ones after [R].
  EXPECT_THAT(t->Encode("hello   [L]hello", false), ElementsAre(8, 14, 8));
  EXPECT_THAT(t->Encode("[R]   hello", false), ElementsAre(15, 8));
  // single_word: "yo" only as a word of its own.
  EXPECT_THAT(t->Encode("yo hello", false), ElementsAre(16, 4, 8));
  EXPECT_THAT(t->Encode("yoyo", false), ElementsAre(9, 3, 9, 3));
  // normalized: "HI" matches after lower-casing, whichever case the text has.
  EXPECT_THAT(t->Encode("HI", false), ElementsAre(17));
  EXPECT_THAT(t->Encode("hi", false), ElementsAre(17));
  // Special tokens as text when not parsed; non-special added tokens still
  // match.
  EXPECT_THAT(t->Encode("<eos>yo", false, /*parse_special=*/false),
              ElementsAre(9, 1, 3, 9, 9, 16));
  EXPECT_THAT(t->Encode("<eos>", false, true), ElementsAre(13));
  // No decoder: tokens are joined with spaces, as HF does.
  EXPECT_EQ(t->Decode({18, 8, 4, 16, 13}), "<bos> hello   yo <eos>");
  EXPECT_EQ(t->Decode({18, 8, 4, 16, 13}, /*skip_special=*/true), "hello   yo");
  StreamingDetokenizer d(*t, /*skip_special=*/true);
  std::string streamed;
  for (int32_t id : {18, 8, 4, 999, 16, 13}) streamed += d.Push(id);
  EXPECT_EQ(streamed + d.Flush(), "hello   yo");
  EXPECT_THAT(t->eos_ids(), ElementsAre());  // no config, no EOS-named token
}

TEST(TokenizerFeaturesTest, ConfigOverrides) {
  auto t = Tiny(
      R"({"add_bos_token": false, "add_eos_token": false, "eos_token": {"content": "<eos>"},
      "chat_template": [{"name": "tool_use", "template": "T2"}, {"name": "default", "template": "T1"}]})");
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->adds_bos());
  EXPECT_THAT(t->Encode("hello"), ElementsAre(8));
  EXPECT_THAT(t->eos_ids(), ElementsAre(13));
  EXPECT_EQ(t->chat_template(), "T1");
  t->set_eos_ids({13, 15});
  EXPECT_THAT(t->eos_ids(), ElementsAre(13, 15));
}

absl::Status LoadError(const std::string& json,
                       const std::string& config = "") {
  return Tokenizer::FromHfJson(json, config).status();
}

std::string WithModel(const std::string& model) {
  return R"({"added_tokens": [], "model": )" + model + "}";
}

TEST(TokenizerErrorTest, MalformedJson) {
  const absl::Status s =
      LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0,}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tokenizer.json is not valid JSON at byte"));
  EXPECT_EQ(LoadError("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(LoadError("[1, 2]").message()),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(std::string(LoadError(R"({"version": "1.0"})").message()),
              HasSubstr("\"model\""));
  EXPECT_THAT(std::string(LoadError(kTiny, "{oops").message()),
              HasSubstr("tokenizer_config.json is not valid JSON"));
}

TEST(TokenizerErrorTest, UnsupportedModelTypes) {
  for (const char* type : {"Unigram", "WordPiece", "WordLevel"}) {
    const absl::Status s = LoadError(
        WithModel(std::string(R"({"type": ")") + type + R"(", "vocab": []})"));
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << type;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(std::string("'") + type + "'"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("only BPE"));
  }
}

TEST(TokenizerErrorTest, BadModelContents) {
  EXPECT_THAT(
      std::string(
          LoadError(WithModel(R"({"type": "BPE", "vocab": [1]})")).message()),
      HasSubstr("model.vocab must be an object"));
  EXPECT_THAT(
      std::string(
          LoadError(WithModel(R"({"type": "BPE", "vocab": {"a": "x"}})"))
              .message()),
      HasSubstr("model.vocab['a']"));
  EXPECT_THAT(
      std::string(
          LoadError(WithModel(R"({"type": "BPE", "vocab": {"a": 0, "b": 0}})"))
              .message()),
      HasSubstr("two pieces"));
  EXPECT_THAT(
      std::string(
          LoadError(
              WithModel(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [7]})"))
              .message()),
      HasSubstr("merge #0"));
  EXPECT_THAT(
      std::string(
          LoadError(
              WithModel(
                  R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})"))
              .message()),
      HasSubstr("missing from the vocab"));
  EXPECT_THAT(
      std::string(
          LoadError(
              WithModel(
                  R"({"type": "BPE", "vocab": {"a": 0}, "unk_token": "<unk>"})"))
              .message()),
      HasSubstr("unk_token"));
  EXPECT_THAT(
      std::string(
          LoadError(
              R"({"added_tokens": [{"id": "x"}], "model": {"type": "BPE", "vocab": {}}})")
              .message()),
      HasSubstr("added_tokens"));
}

TEST(TokenizerErrorTest, UnsupportedPipelineParts) {
  const std::string model =
      R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  auto with = [&](const std::string& part) {
    return "{" + part + ", " + model + "}";
  };
  absl::Status s =
      LoadError(with(R"("pre_tokenizer": {"type": "BertPreTokenizer"})"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("BertPreTokenizer"));
  s = LoadError(with(R"("normalizer": {"type": "Precompiled"})"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Precompiled"));
  s = LoadError(with(R"("decoder": {"type": "WordPiece"})"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("WordPiece"));
  s = LoadError(with(R"("post_processor": {"type": "Whatever"})"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  s = LoadError(with(
      R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[a-"}, "behavior": "Isolated"})"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad regex"));
  s = LoadError(with(
      R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [5]}}})"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("outside the vocab"));
  s = LoadError(kTiny, R"({"bos_token": "<nope>"})");
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("'<nope>' is not in the vocab"));
}

TEST(TokenizerErrorTest, Files) {
  auto missing = Tokenizer::FromHfFiles("/nonexistent/tokenizer.json", "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("/nonexistent/tokenizer.json"));
  const std::string path = testing::TempPath("broken_tokenizer.json");
  std::ofstream(path) << "{\"model\": ";
  auto broken = Tokenizer::FromHfFiles(path, "");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr(path));
  auto no_config = Tokenizer::FromHfFiles(
      testing::TokenizerTestData("llama2/tokenizer.json"),
      "/nonexistent/tokenizer_config.json");
  EXPECT_EQ(no_config.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem
