// Pre-tokenizers, split behaviors, regexes and normalizers.
#include "common/tokenizer/pretokenizer.h"

#include <string>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/regex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::tok {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;

std::vector<std::string> Words(const PreTokenizer& p, std::string_view text,
                               bool at_start = true) {
  std::vector<std::string> w;
  p.Split(text, at_start, &w);
  return w;
}

std::vector<std::string> Pieces(std::string_view text,
                                const std::vector<std::pair<size_t, size_t>>& m,
                                SplitBehavior b, bool invert = false) {
  std::vector<std::pair<size_t, size_t>> r;
  SplitByMatches(text, m, b, invert, &r);
  std::vector<std::string> out;
  for (auto [s, e] : r) out.emplace_back(text.substr(s, e - s));
  return out;
}

TEST(SplitTest, Behaviors) {
  // "a-b--c" split on each '-'.
  const std::string t = "a-b--c";
  const std::vector<std::pair<size_t, size_t>> m = {{1, 2}, {3, 4}, {4, 5}};
  EXPECT_THAT(Pieces(t, m, SplitBehavior::kRemoved),
              ElementsAre("a", "b", "c"));
  EXPECT_THAT(Pieces(t, m, SplitBehavior::kIsolated),
              ElementsAre("a", "-", "b", "-", "-", "c"));
  EXPECT_THAT(Pieces(t, m, SplitBehavior::kMergedWithPrevious),
              ElementsAre("a-", "b-", "-", "c"));
  EXPECT_THAT(Pieces(t, m, SplitBehavior::kMergedWithNext),
              ElementsAre("a", "-b", "-", "-c"));
  EXPECT_THAT(Pieces(t, m, SplitBehavior::kContiguous),
              ElementsAre("a", "-", "b", "--", "c"));
  EXPECT_THAT(Pieces(t, m, SplitBehavior::kRemoved, /*invert=*/true),
              ElementsAre("-", "-", "-"));
}

TEST(RegexTest, Gpt2Regex) {
  auto re = Regex::Create(std::string(kGpt2Regex));
  ASSERT_TRUE(re.ok());
  const std::string t = "Hello world's  123 foo!!\n\n  x";
  std::vector<std::pair<size_t, size_t>> m;
  (*re)->FindAll(t, &m);
  std::vector<std::string> got;
  for (auto [b, e] : m) got.push_back(t.substr(b, e - b));
  EXPECT_THAT(got, ElementsAre("Hello", " world", "'s", " ", " 123", " foo",
                               "!!", "\n\n ", " x"));
}

TEST(RegexTest, OnigCompatibleWhitespace) {
  EXPECT_EQ(OnigCompatPattern("\\s+(?!\\S)"), "[\\s\\x{85}]+(?![^\\s\\x{85}])");
  EXPECT_EQ(OnigCompatPattern("[^\\s,]"), "[^\\s\\x{85},]");
  EXPECT_EQ(OnigCompatPattern("[]\\s]"), "[]\\s\\x{85}]");
  auto re = Regex::Create("\\s+");
  ASSERT_TRUE(re.ok());
  std::vector<std::pair<size_t, size_t>> m;
  (*re)->FindAll(
      "a\xC2\x85"
      "b",
      &m);  // U+0085 NEL is whitespace, as in Oniguruma
  EXPECT_THAT(m, ElementsAre(std::make_pair(size_t{1}, size_t{3})));
}

// Letters and numbers assigned in Unicode 15.0-16.0 are members of \p{..}, as
// in Oniguruma: U+31350 (CJK Extension H, Lo), U+2EBF0 (Extension I, Lo),
// U+13460 (Egyptian Hieroglyphs Extended-A, Lo), U+1D2C0 (Kaktovik numeral, No).
TEST(RegexTest, CategoriesKnowUnicode16) {
  const std::string ext_h = "\xF0\xB1\x8D\x90", ext_i = "\xF0\xAE\xAF\xB0";
  const std::string egyptian = "\xF0\x93\x91\xA0", kaktovik = "\xF0\x9D\x8B\x80";
  const auto matches = [](const std::string& pattern, const std::string& text) {
    auto re = Regex::Create(pattern);
    EXPECT_TRUE(re.ok()) << re.status();
    std::vector<std::pair<size_t, size_t>> m;
    if (re.ok()) (*re)->FindAll(text, &m);
    std::vector<std::string> got;
    for (auto [b, e] : m) got.push_back(text.substr(b, e - b));
    return got;
  };
  EXPECT_THAT(matches("\\p{L}+", ext_h + ext_i + egyptian + "!"),
              ElementsAre(ext_h + ext_i + egyptian));
  EXPECT_THAT(matches("\\pL+", "!" + ext_h), ElementsAre(ext_h));
  EXPECT_THAT(matches("\\p{Lo}", ext_h), ElementsAre(ext_h));
  EXPECT_THAT(matches("\\p{Lu}", ext_h), ElementsAre());
  EXPECT_THAT(matches("\\p{N}", kaktovik), ElementsAre(kaktovik));
  EXPECT_THAT(matches("\\P{L}", ext_h + "!"), ElementsAre("!"));
  EXPECT_THAT(matches("[^\\r\\n\\p{L}\\p{N}]+", ext_h + kaktovik + "'!"), ElementsAre("'!"));
  // Qwen's pattern splits a contraction off such a letter as HF does.
  EXPECT_THAT(matches(std::string(kGpt2Regex), ext_h + "'t"), ElementsAre(ext_h, "'t"));
  // Scripts and a \P inside a class are left as written.
  EXPECT_EQ(OnigCompatPattern("\\p{Greek}[\\P{L}]"), "\\p{Greek}[\\P{L}]");
}

TEST(RegexTest, BadPatternIsAnError) {
  auto re = Regex::Create("(unclosed");
  EXPECT_EQ(re.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(re.status().message()),
              ::testing::HasSubstr("(unclosed"));
}

TEST(RegexTest, LongRunsOfSpacesDoNotOverflow) {
  auto re = Regex::Create(std::string(kGpt2Regex));
  ASSERT_TRUE(re.ok());
  const std::string t = std::string(200000, ' ') + "x";
  std::vector<std::pair<size_t, size_t>> m;
  (*re)->FindAll(t, &m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].second, 199999u);
}

TEST(PreTokenizerTest, ByteLevelMapsBytes) {
  auto p = PreTokenizer::FromJson(json::parse(
      R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":true})"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*p)->byte_level());
  // Prefix space added; space -> 'Ġ', newline -> 'Ċ', 'é' -> 'Ã©'.
  EXPECT_THAT(Words(**p, "hi caf\xC3\xA9\n"), ElementsAre("\xC4\xA0hi",
                                                          "\xC4\xA0"
                                                          "caf\xC3\x83\xC2\xA9",
                                                          "\xC4\x8A"));
}

TEST(PreTokenizerTest, SmolLM2Sequence) {
  auto p =
      PreTokenizer::FromJson(json::parse(R"({"type":"Sequence","pretokenizers":[
      {"type":"Digits","individual_digits":true},
      {"type":"ByteLevel","add_prefix_space":false,"use_regex":true}]})"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(Words(**p, "x 123"), ElementsAre("x", "\xC4\xA0", "1", "2", "3"));
  auto grouped = PreTokenizer::FromJson(
      json::parse(R"({"type":"Digits","individual_digits":false})"));
  ASSERT_TRUE(grouped.ok());
  EXPECT_THAT(Words(**grouped, "ab12c3"), ElementsAre("ab", "12", "c", "3"));
}

TEST(PreTokenizerTest, SplitRegexIsolated) {
  auto p = PreTokenizer::FromJson(json::parse(
      R"({"type":"Split","pattern":{"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":false})"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(Words(**p, "a1234567"), ElementsAre("a", "123", "456", "7"));
  auto s = PreTokenizer::FromJson(json::parse(
      R"({"type":"Split","pattern":{"String":", "},"behavior":"Removed","invert":false})"));
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(Words(**s, "a, b, c"), ElementsAre("a", "b", "c"));
}

TEST(PreTokenizerTest, Metaspace) {
  auto p = PreTokenizer::FromJson(json::parse(
      R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false})"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(Words(**p, "a b", /*at_start=*/true), ElementsAre("\xE2\x96\x81"
                                                                "a\xE2\x96\x81"
                                                                "b"));
  EXPECT_THAT(Words(**p, "a b", /*at_start=*/false), ElementsAre("a\xE2\x96\x81"
                                                                 "b"));
  auto split = PreTokenizer::FromJson(json::parse(
      R"({"type":"Metaspace","replacement":"▁","add_prefix_space":true})"));
  ASSERT_TRUE(split.ok());
  EXPECT_THAT(Words(**split, "a b"), ElementsAre("\xE2\x96\x81"
                                                 "a",
                                                 "\xE2\x96\x81"
                                                 "b"));
}

TEST(PreTokenizerTest, Errors) {
  EXPECT_EQ(
      PreTokenizer::FromJson(json::parse(R"({"type":"BertPreTokenizer"})"))
          .status()
          .code(),
      absl::StatusCode::kUnimplemented);
  EXPECT_EQ(PreTokenizer::FromJson(
                json::parse(R"({"type":"Split","pattern":{"Regex":"("},
      "behavior":"Isolated"})"))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PreTokenizer::FromJson(
                json::parse(R"({"type":"Split","pattern":{"Regex":"a"},
      "behavior":"Sideways"})"))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PreTokenizer::FromJson(json::parse(R"([1,2])")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PreTokenizerTest, LlamaCppNames) {
  bool ignore = false, known = false;
  auto r = LlamaCppPreRegexes("smollm", &ignore, &known);
  EXPECT_TRUE(known);
  EXPECT_FALSE(ignore);
  EXPECT_THAT(r, ElementsAre("\\p{N}", std::string(kGpt2Regex)));
  r = LlamaCppPreRegexes("llama-bpe", &ignore, &known);
  EXPECT_TRUE(ignore);
  EXPECT_EQ(r.size(), 1u);
  r = LlamaCppPreRegexes("qwen2", &ignore, &known);
  EXPECT_FALSE(ignore);
  r = LlamaCppPreRegexes("no-such-pre", &ignore, &known);
  EXPECT_FALSE(known);
  EXPECT_EQ(r.size(), 4u);  // llama.cpp's "default" set
  for (const char* name :
       {"default", "gpt2", "llama3", "qwen2", "smollm", "smaug-bpe",
        "deepseek-coder", "deepseek-v3", "falcon", "tekken", "gpt-4o",
        "poro-chat", "viking", "seed-coder", "chatglm-bpe"}) {
    for (const std::string& re : LlamaCppPreRegexes(name, &ignore, &known)) {
      EXPECT_TRUE(Regex::Create(re).ok()) << name << ": " << re;
    }
  }
  // Llama-3's regex: numbers in groups of up to three.
  auto p = PreTokenizer::FromRegexes(
      LlamaCppPreRegexes("llama3", &ignore, &known), false);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(Words(**p, "x 1234567"),
              ElementsAre("x", " ", "123", "456", "7"));
}

TEST(NormalizerTest, Steps) {
  auto n =
      Normalizer::FromJson(json::parse(R"({"type":"Sequence","normalizers":[
      {"type":"NFC"},{"type":"Prepend","prepend":"▁"},
      {"type":"Replace","pattern":{"String":" "},"content":"▁"}]})"));
  ASSERT_TRUE(n.ok()) << n.status();
  std::string s = "Cafe\xCC\x81 au lait";
  (*n)->Apply(&s);
  EXPECT_EQ(s,
            "\xE2\x96\x81"
            "Caf\xC3\xA9\xE2\x96\x81"
            "au\xE2\x96\x81lait");
  std::string empty;
  (*n)->Apply(&empty);
  EXPECT_EQ(empty, "");  // Prepend leaves empty text alone

  auto re =
      Normalizer::FromJson(json::parse(R"({"type":"Sequence","normalizers":[
      {"type":"Replace","pattern":{"Regex":" {2,}"},"content":" "},{"type":"Lowercase"},
      {"type":"Strip","strip_left":true,"strip_right":true}]})"));
  ASSERT_TRUE(re.ok()) << re.status();
  s = "  HeLLo    ÀB  ";
  (*re)->Apply(&s);
  EXPECT_EQ(s, "hello àb");
  auto nfkc = Normalizer::FromJson(json::parse(R"({"type":"NFKC"})"));
  ASSERT_TRUE(nfkc.ok());
  s = "\xEF\xAC\x81";  // U+FB01 LATIN SMALL LIGATURE FI
  (*nfkc)->Apply(&s);
  EXPECT_EQ(s, "fi");
  EXPECT_EQ(Normalizer::FromJson(json::parse(R"({"type":"Precompiled"})"))
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
}

TEST(ByteLevelTest, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string mapped = BytesToUnicode(all);
  std::string back;
  ASSERT_TRUE(UnicodeToBytes(mapped, &back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(ByteToUnicode('A'), "A");
  std::string out = "x";
  EXPECT_FALSE(UnicodeToBytes("\xE4\xBD\xA0", &out));  // '你' is not in the map
  EXPECT_EQ(out, "x");
}

}  // namespace
}  // namespace tandem::tok
