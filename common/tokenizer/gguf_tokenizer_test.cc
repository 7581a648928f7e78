// GGUF tokenizers: the Llama-2 and Qwen3 tokenizer.json files converted to
// GGUF metadata (as llama.cpp's convert script would) must tokenize like HF;
// plus hand-made GGUF vocabularies and GGUF errors.
#include <string>
#include <vector>

#include "common/tokenizer/testing/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::tandem::testing::GgufFromTokenizerJson;
using ::tandem::testing::GgufTestWriter;
using ::tandem::testing::Printable;
using ::tandem::testing::TokenizerFromGguf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Qwen3's vocab and merges as a GGUF "gpt2" tokenizer with pre "qwen2":
// llama.cpp's regex for qwen2 must split like tokenizer.json's Split regex.
// llama.cpp applies no NFC normalization, so texts that NFC changes are
// skipped.
TEST(GgufTokenizerTest, Qwen3AsGgufMatchesHf) {
  auto w = GgufFromTokenizerJson(testing::Qwen3Dir() + "/tokenizer.json",
                                 "gpt2", "qwen2");
  ASSERT_TRUE(w.ok()) << w.status();
  auto t = TokenizerFromGguf(*w, "qwen3");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 151669);
  EXPECT_FALSE((*t)->adds_bos());
  EXPECT_THAT((*t)->eos_ids(), ElementsAre(151645, 151643));
  auto g = testing::LoadGoldens("qwen3_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  int checked = 0;
  for (const auto& c : g->cases) {
    if (tok::Normalize(c.text, tok::NormalForm::kNfc) != c.text) continue;
    SCOPED_TRACE("text: \"" + Printable(c.text) + "\"");
    EXPECT_THAT((*t)->Encode(c.text), ElementsAreArray(c.ids));
    EXPECT_THAT((*t)->Encode(c.text, true, /*parse_special=*/false),
                ElementsAreArray(c.ids_plain));
    EXPECT_EQ((*t)->Decode(c.ids), c.decoded);
    EXPECT_EQ((*t)->Decode(c.ids, true), c.decoded_skip_special);
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

// Llama-2's vocab as a GGUF "llama" (SentencePiece) tokenizer with scores
// -id: llama.cpp's merge-by-score must reproduce HF's ranked merges.
TEST(GgufTokenizerTest, Llama2AsGgufSpmMatchesHf) {
  auto w = GgufFromTokenizerJson(
      testing::TokenizerTestData("llama2/tokenizer.json"), "llama", "");
  ASSERT_TRUE(w.ok()) << w.status();
  auto t = TokenizerFromGguf(*w, "llama2");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_TRUE((*t)->adds_bos());
  EXPECT_THAT((*t)->eos_ids(), ElementsAre(2));
  auto g = testing::LoadGoldens("llama2_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  for (const auto& c : g->cases) {
    SCOPED_TRACE("text: \"" + Printable(c.text) + "\"");
    EXPECT_THAT((*t)->Encode(c.text), ElementsAreArray(c.ids));
    EXPECT_THAT((*t)->Encode(c.text, false), ElementsAreArray(c.ids_no_add));
    EXPECT_THAT((*t)->Encode(c.text, true, false),
                ElementsAreArray(c.ids_plain));
    EXPECT_EQ((*t)->Decode(c.ids), c.decoded);
    EXPECT_EQ((*t)->Decode(c.ids, true), c.decoded_skip_special);
  }
}

// A hand-made SentencePiece vocabulary: merges follow the merged token's score.
TEST(GgufTokenizerTest, TinySpmMergesByScore) {
  std::vector<std::string> tokens = {"<unk>",
                                     "<s>",
                                     "</s>",
                                     "\xE2\x96\x81",
                                     "a",
                                     "b",
                                     "c",
                                     "ab",
                                     "bc",
                                     "\xE2\x96\x81"
                                     "a",
                                     "abc"};
  std::vector<float> scores = {0, 0, 0, -1, -1, -1, -1, -5, -2, -3, -4};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  scores.resize(tokens.size(), 0);
  GgufTestWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddFloat32Array("tokenizer.ggml.scores", scores);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddString("tokenizer.chat_template", "{{ messages }}");
  auto t = TokenizerFromGguf(w, "tiny_spm");
  ASSERT_TRUE(t.ok()) << t.status();
  // "▁abc": "bc" (-2) beats "▁a" (-3) and "ab" (-5); then "▁a"; "▁a"+"bc" is
  // not a token, so it stays two pieces.
  EXPECT_THAT((*t)->Encode("abc", false), ElementsAre(9, 8));
  EXPECT_THAT((*t)->Encode("abc"),
              ElementsAre(1, 9, 8));  // SPM adds BOS by default
  // 'é' is not in the vocab: byte fallback.
  const int32_t c3 = 11 + 0xC3, a9 = 11 + 0xA9;
  EXPECT_THAT((*t)->Encode("\xC3\xA9", false), ElementsAre(3, c3, a9));
  EXPECT_EQ((*t)->Decode({1, 3, c3, a9, 9}), "<s> \xC3\xA9 a");
  EXPECT_EQ((*t)->Decode({3, c3, a9, 9}), "\xC3\xA9 a");
  EXPECT_EQ((*t)->chat_template(), "{{ messages }}");
}

TEST(GgufTokenizerTest, Errors) {
  {
    GgufTestWriter w;
    w.AddString("general.architecture", "llama");
    auto t = TokenizerFromGguf(w, "no_tokenizer");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(t.status().message()),
                HasSubstr("tokenizer.ggml.model"));
  }
  {
    GgufTestWriter w;
    w.AddString("tokenizer.ggml.model", "bert");
    w.AddStringArray("tokenizer.ggml.tokens", {"a"});
    auto t = TokenizerFromGguf(w, "bert");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("'bert'"));
  }
  {
    GgufTestWriter w;
    w.AddString("tokenizer.ggml.model", "gpt2");
    w.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
    auto t = TokenizerFromGguf(w, "no_merges");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(t.status().message()),
                HasSubstr("tokenizer.ggml.merges"));
  }
  {
    GgufTestWriter w;
    w.AddString("tokenizer.ggml.model", "gpt2");
    w.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
    w.AddStringArray("tokenizer.ggml.merges", {"a b"});
    w.AddInt32Array("tokenizer.ggml.token_type", {1});
    auto t = TokenizerFromGguf(w, "bad_types");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("token types"));
  }
  {
    GgufTestWriter w;
    w.AddString("tokenizer.ggml.model", "gpt2");
    w.AddString("tokenizer.ggml.tokens", "not an array");
    auto t = TokenizerFromGguf(w, "tokens_not_array");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace tandem
