// StreamingDetokenizer: the concatenation of Push outputs and Flush equals
// Decode, and no chunk is ever invalid UTF-8.
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/testing/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::tandem::testing::IsStrictUtf8;
using ::tandem::testing::Printable;

// Streams `ids`, checking every chunk; returns the concatenation.
std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids,
                   bool skip_special,
                   std::vector<std::string>* chunks = nullptr) {
  StreamingDetokenizer d(t, skip_special);
  std::string all;
  for (int32_t id : ids) {
    const std::string c = d.Push(id);
    EXPECT_TRUE(IsStrictUtf8(c))
        << "chunk \"" << Printable(c) << "\" after id " << id;
    if (chunks != nullptr) chunks->push_back(c);
    all += c;
  }
  const std::string c = d.Flush();
  EXPECT_TRUE(IsStrictUtf8(c)) << "flush \"" << Printable(c) << "\"";
  if (chunks != nullptr) chunks->push_back(c);
  return all + c;
}

void CheckCorpus(const Tokenizer& t, const char* goldens) {
  auto g = testing::LoadGoldens(goldens);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const auto& c : g->cases) {
    SCOPED_TRACE("text: \"" + Printable(c.text) + "\"");
    for (bool skip : {false, true}) {
      EXPECT_EQ(Stream(t, c.ids, skip), t.Decode(c.ids, skip));
      EXPECT_EQ(Stream(t, c.ids, skip),
                skip ? c.decoded_skip_special : c.decoded);
    }
  }
}

TEST(StreamingDetokenizerTest, Llama2CorpusMatchesDecode) {
  CheckCorpus(testing::Llama2(), "llama2_goldens.json");
}
TEST(StreamingDetokenizerTest, Qwen3CorpusMatchesDecode) {
  CheckCorpus(testing::Qwen3(), "qwen3_goldens.json");
}

// Emoji and CJK that Llama-2 spells with <0xXX> byte-fallback tokens: output
// appears only once a character is complete.
TEST(StreamingDetokenizerTest, Llama2ByteFallbackHoldsPartialCharacters) {
  const Tokenizer& t = testing::Llama2();
  // U+13000 EGYPTIAN HIEROGLYPH A001, a ZWJ sequence, U+9F98.
  const std::string text =
      "\xF0\x93\x80\x80 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 "
      "\xE9\xBE\x98";
  const auto ids = t.Encode(text, /*add_bos=*/false);
  int byte_tokens = 0;
  for (int32_t id : ids)
    byte_tokens += t.TokenPiece(id).rfind("<0x", 0) == 0 ? 1 : 0;
  ASSERT_GE(byte_tokens, 4) << "expected byte-fallback tokens in this text";
  std::vector<std::string> chunks;
  EXPECT_EQ(Stream(t, ids, false, &chunks), text);
  EXPECT_EQ(t.Decode(ids), text);
  // The first character (4 bytes) needs 4 byte tokens after "▁": 3 empty
  // chunks.
  ASSERT_GE(chunks.size(), 5u);
  EXPECT_EQ(chunks[0], "");  // "▁" alone: the leading space is stripped
  EXPECT_EQ(chunks[1], "");
  EXPECT_EQ(chunks[2], "");
  EXPECT_EQ(chunks[3], "");
  EXPECT_EQ(chunks[4], "\xF0\x93\x80\x80");
}

// Byte-level BPE: rare CJK characters and emoji span several tokens.
TEST(StreamingDetokenizerTest, Qwen3SplitsCharactersAcrossTokens) {
  const Tokenizer& t = testing::Qwen3();
  const std::string text =
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7"
      " "
      "\xF0\x9D\x94\x98\xF0\x9D\x94\xAB \xF0\x93\x80\x80 "
      "\xE9\xBE\x98\xE9\xBD\x89";
  const auto ids = t.Encode(text);
  int partial = 0;
  for (int32_t id : ids) {
    const std::string one = t.Decode({id});
    EXPECT_TRUE(
        IsStrictUtf8(one));  // Decode of one id alone is valid UTF-8 ...
    partial += one.find("\xEF\xBF\xBD") != std::string::npos ? 1 : 0;
  }
  EXPECT_GT(partial,
            3);  // ... but lossy for tokens holding part of a character
  EXPECT_EQ(Stream(t, ids, false), text);  // ... and streaming reassembles it
}

TEST(StreamingDetokenizerTest, LeadingSpaceRule) {
  const Tokenizer& t = testing::Llama2();
  const int32_t hello = *t.TokenToId("\xE2\x96\x81Hello");
  const int32_t world = *t.TokenToId("\xE2\x96\x81world");
  StreamingDetokenizer d(t);
  EXPECT_EQ(d.Push(hello), "Hello");
  EXPECT_EQ(d.Push(world), " world");
  EXPECT_EQ(d.Flush(), "");
  EXPECT_EQ(t.Decode({hello, world}), "Hello world");
  // After BOS the space stays (as in HF: Strip acts on the fused string).
  EXPECT_EQ(Stream(t, {1, hello}, false), "<s> Hello");
  EXPECT_EQ(Stream(t, {1, hello}, true), "Hello");
  EXPECT_EQ(t.Decode({1, hello}), "<s> Hello");
  EXPECT_EQ(t.Decode({1, hello}, true), "Hello");
}

TEST(StreamingDetokenizerTest, InvalidLeftoversBecomeReplacementChars) {
  const Tokenizer& t = testing::Llama2();
  const int32_t e4 = *t.TokenToId("<0xE4>");
  const int32_t bd = *t.TokenToId("<0xBD>");
  const int32_t ff = *t.TokenToId("<0xFF>");
  const int32_t a = *t.TokenToId("a");
  StreamingDetokenizer d(t);
  EXPECT_EQ(d.Push(e4), "");
  EXPECT_EQ(d.Push(bd), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");  // one U+FFFD for the cut-off character
  EXPECT_EQ(t.Decode({e4, bd}), "\xEF\xBF\xBD");

  StreamingDetokenizer d2(t);
  EXPECT_EQ(d2.Push(e4), "");
  EXPECT_EQ(d2.Push(a),
            "\xEF\xBF\xBD"
            "a");                          // known bad as soon as 'a' arrives
  EXPECT_EQ(d2.Push(ff), "\xEF\xBF\xBD");  // 0xFF can never start a character
  EXPECT_EQ(d2.Flush(), "");
  EXPECT_EQ(t.Decode({e4, a, ff}),
            "\xEF\xBF\xBD"
            "a\xEF\xBF\xBD");
}

// Random id sequences (including special tokens and out-of-range ids).
TEST(StreamingDetokenizerTest, RandomIdsMatchDecode) {
  std::mt19937 rng(1234);
  for (const Tokenizer* t : {&testing::Llama2(), &testing::Qwen3()}) {
    std::uniform_int_distribution<int32_t> any(
        0, static_cast<int32_t>(t->vocab_size()) + 2);
    std::uniform_int_distribution<int32_t> bytes(
        3, 3 + 255);  // Llama-2's byte tokens
    for (int round = 0; round < 200; ++round) {
      std::vector<int32_t> ids;
      const int n = 1 + round % 17;
      for (int i = 0; i < n; ++i)
        ids.push_back(round % 2 == 0 ? any(rng) : bytes(rng));
      for (bool skip : {false, true}) {
        const std::string s = Stream(*t, ids, skip);
        EXPECT_EQ(s, t->Decode(ids, skip));
        EXPECT_TRUE(IsStrictUtf8(s));
      }
    }
  }
}

}  // namespace
}  // namespace tandem
