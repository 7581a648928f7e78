// Token-for-token comparison with HF `tokenizers` goldens
// (tests/golden/make_tokenizer_goldens.py) for Llama-2 (SentencePiece-style
// BPE with byte fallback), Qwen3 (byte-level BPE, NFC, special tokens) and
// SmolLM2 (byte-level BPE from GGUF).
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "common/gguf.h"
#include "common/tokenizer/testing/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::tandem::testing::GoldenCase;
using ::tandem::testing::Goldens;
using ::tandem::testing::LoadGoldens;
using ::tandem::testing::Printable;
using ::testing::ElementsAreArray;

// Checks every golden case: the three encodings, both decodings, and the
// round trip where HF round-trips.
void CheckGoldens(const Tokenizer& t, const Goldens& g) {
  int failures = 0;
  for (const GoldenCase& c : g.cases) {
    SCOPED_TRACE("text: \"" + Printable(c.text) + "\"  oracle " + g.versions);
    const auto ids = t.Encode(c.text, /*add_bos=*/true, /*parse_special=*/true);
    const auto ids_no_add =
        t.Encode(c.text, /*add_bos=*/false, /*parse_special=*/true);
    const auto ids_plain =
        t.Encode(c.text, /*add_bos=*/true, /*parse_special=*/false);
    EXPECT_THAT(ids, ElementsAreArray(c.ids));
    EXPECT_THAT(ids_no_add, ElementsAreArray(c.ids_no_add));
    EXPECT_THAT(ids_plain, ElementsAreArray(c.ids_plain));
    EXPECT_EQ(t.Decode(c.ids), c.decoded);
    EXPECT_EQ(t.Decode(c.ids, /*skip_special=*/true), c.decoded_skip_special);
    if (c.roundtrip) {
      EXPECT_EQ(t.Decode(ids_no_add), c.text);
    }
    if (::testing::Test::HasFailure() && ++failures > 5)
      break;  // keep the output readable
  }
}

TEST(TokenizerGoldenTest, Llama2MatchesHf) {
  auto g = LoadGoldens("llama2_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GE(g->cases.size(), 40u);
  CheckGoldens(testing::Llama2(), *g);
}

TEST(TokenizerGoldenTest, Qwen3MatchesHf) {
  auto g = LoadGoldens("qwen3_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  CheckGoldens(testing::Qwen3(), *g);
}

// Random text (tests/golden/make_random_tokenizer_goldens.py): every script,
// spacing, marks, emoji sequences, special-token text and control characters.
TEST(TokenizerGoldenTest, Llama2MatchesHfOnRandomText) {
  auto g = LoadGoldens("llama2_random_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GE(g->cases.size(), 200u);
  CheckGoldens(testing::Llama2(), *g);
}

TEST(TokenizerGoldenTest, Qwen3MatchesHfOnRandomText) {
  auto g = LoadGoldens("qwen3_random_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GE(g->cases.size(), 200u);
  CheckGoldens(testing::Qwen3(), *g);
}

// SmolLM2's tokenizer from the default model's GGUF; skips without it.
std::unique_ptr<Tokenizer> SmolLM2FromGguf() {
  const char* path = std::getenv("TANDEM_SMOLLM2_GGUF");
  if (path == nullptr || *path == '\0') return nullptr;
  auto gguf = GgufFile::Open(path);
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  auto t = Tokenizer::FromGguf(**gguf);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

constexpr char kNoSmolLM2[] =
    "set TANDEM_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf to run this test";

TEST(TokenizerGoldenTest, SmolLM2GgufMatchesHf) {
  std::unique_ptr<Tokenizer> t = SmolLM2FromGguf();
  if (t == nullptr && !HasFailure()) GTEST_SKIP() << kNoSmolLM2;
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 49152);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_THAT(t->eos_ids(), ::testing::Contains(2));
  EXPECT_FALSE(t->adds_bos());
  EXPECT_THAT(t->chat_template(), ::testing::HasSubstr("<|im_start|>"));
  auto g = LoadGoldens("smollm2_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  CheckGoldens(*t, *g);
}

TEST(TokenizerGoldenTest, SmolLM2GgufMatchesHfOnRandomText) {
  std::unique_ptr<Tokenizer> t = SmolLM2FromGguf();
  if (t == nullptr && !HasFailure()) GTEST_SKIP() << kNoSmolLM2;
  ASSERT_NE(t, nullptr);
  auto g = LoadGoldens("smollm2_random_goldens.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GE(g->cases.size(), 200u);
  CheckGoldens(*t, *g);
}

TEST(TokenizerGoldenTest, Metadata) {
  const Tokenizer& l = testing::Llama2();
  EXPECT_EQ(l.vocab_size(), 32000);
  EXPECT_EQ(l.bos_id(), 1);
  EXPECT_THAT(l.eos_ids(), ElementsAreArray({2}));
  EXPECT_TRUE(l.adds_bos());
  EXPECT_TRUE(l.IsSpecial(1));
  EXPECT_FALSE(l.IsSpecial(100));
  EXPECT_EQ(l.TokenPiece(13), "<0x0A>");
  EXPECT_EQ(l.TokenToId("<s>"), 1);
  EXPECT_EQ(l.TokenToId("definitely not a token"), std::nullopt);
  EXPECT_EQ(l.chat_template(), "");

  const Tokenizer& q = testing::Qwen3();
  EXPECT_EQ(q.vocab_size(), 151669);
  EXPECT_EQ(q.bos_id(), -1);
  EXPECT_FALSE(q.adds_bos());
  EXPECT_THAT(q.eos_ids(),
              ElementsAreArray({151645, 151643}));  // <|im_end|>, <|endoftext|>
  EXPECT_TRUE(q.IsSpecial(151644));
  EXPECT_FALSE(q.IsSpecial(151667));  // <think> is an added, non-special token
  EXPECT_EQ(q.TokenPiece(151667), "<think>");
  EXPECT_EQ(q.TokenPiece(220), "\xC4\xA0");  // "Ġ"
  EXPECT_THAT(q.chat_template(), ::testing::HasSubstr("<|im_start|>"));
  EXPECT_EQ(q.TokenPiece(-1), "");
  EXPECT_EQ(q.TokenPiece(151669), "");
}

TEST(TokenizerGoldenTest, ValidateIds) {
  const Tokenizer& q = testing::Qwen3();
  EXPECT_TRUE(q.ValidateIds({0, 1, 151668}).ok());
  const absl::Status s = q.ValidateIds({5, 151669, -3});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("151669"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("position 1"));
  EXPECT_EQ(q.ValidateIds({-1}).code(), absl::StatusCode::kInvalidArgument);
  // Decode skips ids it does not know.
  EXPECT_EQ(q.Decode({9707, 999999, -5}), "Hello");
}

TEST(TokenizerGoldenTest, InvalidUtf8InputIsReadAsReplacementChar) {
  const Tokenizer& q = testing::Qwen3();
  EXPECT_EQ(q.Encode("a\xFF"
                     "b"),
            q.Encode("a\xEF\xBF\xBD"
                     "b"));
  EXPECT_EQ(q.Decode(q.Encode("x\xE4\xBD")), "x\xEF\xBF\xBD");
}

TEST(TokenizerGoldenTest, EncodeCachesWords) {
  const Tokenizer& q = testing::Qwen3();
  const std::string text = "the cache keeps words the cache keeps words";
  const auto first = q.Encode(text);
  EXPECT_EQ(q.Encode(text), first);
}

TEST(TokenizerGoldenTest, Qwen3LoadsQuickly) {
  const auto start = std::chrono::steady_clock::now();
  auto t =
      Tokenizer::FromHfFiles(testing::Qwen3Dir() + "/tokenizer.json",
                             testing::Qwen3Dir() + "/tokenizer_config.json");
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(t.ok()) << t.status();
  RecordProperty("load_seconds", std::to_string(secs));
  std::printf("Qwen3 tokenizer.json (11 MB) loaded in %.3f s\n", secs);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(secs, 2.0);  // typically ~0.4 s; generous for loaded machines
#endif
}

}  // namespace
}  // namespace tandem
