// The JSON recognizer against nlohmann::json's parser on fixed cases and on
// random documents and random corruptions of them (fresh each run, the seed
// printed on failure): a complete text is accepted exactly when the parser
// accepts it, and every prefix of a valid text is accepted byte by byte.
#include "coordinator/structured/json_grammar.h"

#include <random>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::structured {
namespace {

// Fed whole: accepted and complete.
bool Accepts(std::string_view text, bool object_only = false) {
  JsonGrammar g(object_only);
  return g.Feed(text) && g.IsComplete();
}

TEST(JsonGrammarTest, FixedCases) {
  for (const char* ok : {"{}", "[]", "0", "-0.5e+10", "1E5", "\"a\\u00e9\\n\"", "true", "null",
                         " {\"a\": [1, 2.5, {\"b\": false}], \"c\": \"\\\"\"}",
                         "[[[[]]], {}, \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"]"}) {
    EXPECT_TRUE(Accepts(ok)) << ok;
    EXPECT_TRUE(nlohmann::json::accept(ok)) << ok;
  }
  for (const char* bad : {"",
                          "{",
                          "{\"a\"}",
                          "{\"a\":}",
                          "[1,]",
                          "{,}",
                          "01",
                          "1.",
                          "1e",
                          "-",
                          ".5",
                          "tru",
                          "nul",
                          "\"\x01\"",
                          "\"\\x\"",
                          "\"\\u12g4\"",
                          "{} {}",
                          "[1 2]",
                          "{\"a\":1,}",
                          "\"\xc0\xaf\"",
                          "\"\xed\xa0\x80\"",
                          "'a'",
                          "{} "}) {
    EXPECT_FALSE(Accepts(bad)) << bad;
  }
}

TEST(JsonGrammarTest, ObjectOnlyWantsAnObjectAtTheTop) {
  EXPECT_TRUE(Accepts("{\"k\": [1]}", true));
  EXPECT_TRUE(Accepts("\n {}", true));
  for (const char* other : {"[]", "1", "\"s\"", "true", "null"}) {
    EXPECT_FALSE(Accepts(other, true)) << other;
  }
}

TEST(JsonGrammarTest, NumbersAreCompleteOnlyAtTheTopLevel) {
  JsonGrammar top;
  ASSERT_TRUE(top.Feed("12"));
  EXPECT_TRUE(top.IsComplete());
  EXPECT_TRUE(top.Feed('3'));  // and may go on
  JsonGrammar inner;
  ASSERT_TRUE(inner.Feed("[12"));
  EXPECT_FALSE(inner.IsComplete());
  EXPECT_TRUE(inner.Feed(']'));
  EXPECT_TRUE(inner.IsComplete());
}

TEST(JsonGrammarTest, DepthIsBounded) {
  std::string deep(JsonGrammar::kMaxDepth, '[');
  JsonGrammar g;
  EXPECT_TRUE(g.Feed(deep));
  EXPECT_FALSE(g.Feed('['));
}

// A random JSON value of depth at most `depth`.
nlohmann::json RandomValue(std::mt19937& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 0 ? 7 : 5));
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3:
      return std::ldexp(static_cast<double>(rng() % 100000) - 50000,
                        static_cast<int>(rng() % 40) - 20);
    case 4: {
      static const char* kPieces[] = {
          "a", "b",    " ", "\"", "\\", "\n", "\t", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
          "/", "\x01", "{", "]"};
      std::string s;
      for (int i = static_cast<int>(rng() % 6); i > 0; --i) s += kPieces[rng() % 14];
      return s;
    }
    case 5: {
      nlohmann::json a = nlohmann::json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i)
        a.push_back(RandomValue(rng, depth - 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) {
        o[std::string(1, static_cast<char>('a' + rng() % 26))] = RandomValue(rng, depth - 1);
      }
      return o;
    }
  }
}

// Whitespace between tokens, as a model might write it.
std::string Spaced(const std::string& compact, std::mt19937& rng) {
  std::string out;
  bool in_string = false, escaped = false;
  for (char c : compact) {
    out += c;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if ((c == ',' || c == ':' || c == '[' || c == '{') && rng() % 3 == 0) {
      out += rng() % 2 ? " " : "\n  ";
    }
  }
  return out;
}

TEST(JsonGrammarTest, AgreesWithNlohmannOnRandomDocumentsAndCorruptions) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string text = Spaced(RandomValue(rng, 4).dump(), rng);
    // Every prefix is accepted; only the whole is complete (a number at the
    // top level is complete at each of its digits).
    JsonGrammar g;
    for (size_t k = 0; k < text.size(); ++k) {
      ASSERT_TRUE(g.Feed(static_cast<uint8_t>(text[k]))) << text << " at byte " << k;
    }
    EXPECT_TRUE(g.IsComplete()) << text;
    // A corruption: a byte replaced, dropped or inserted.
    std::string bad = text;
    const size_t at = rng() % bad.size();
    const char byte = "{}[]\",:0123456789.eE+-tfnrua \\\x01\xc3\xa9\xff"[rng() % 33];
    switch (rng() % 3) {
      case 0:
        bad[at] = byte;
        break;
      case 1:
        bad.erase(at, 1);
        break;
      default:
        bad.insert(at, 1, byte);
    }
    while (!bad.empty() && (bad.back() == ' ' || bad.back() == '\n')) bad.pop_back();
    // nlohmann also checks surrogate pairs and that numbers fit a double;
    // JSON's grammar does not, and neither do we.
    if (bad.find("\\u") != std::string::npos ||
        std::regex_search(bad, std::regex("[eE][+-]?[0-9]{3,}"))) {
      continue;
    }
    const bool want = nlohmann::json::accept(bad);
    EXPECT_EQ(Accepts(bad), want) << "'" << bad << "' from '" << text << "'";
    rejected += want ? 0 : 1;
  }
  EXPECT_GT(rejected, 1000);  // the corruptions did break documents
}

}  // namespace
}  // namespace tandem::structured
