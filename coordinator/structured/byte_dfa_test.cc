// Patterns against std::regex's ECMAScript engine (regex_search: JSON
// Schema's unanchored reading) on random patterns and strings, fresh each
// run with the seed printed on failure; UTF-8 and the refused constructs
// on fixed cases.
#include "coordinator/structured/byte_dfa.h"

#include <random>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tandem::structured {
namespace {

// The whole string is fed; -1 (no match can follow) ends it early.
bool Matches(const ByteDfa& dfa, std::string_view s) {
  int32_t state = dfa.start();
  for (char c : s) {
    state = dfa.Next(state, static_cast<uint8_t>(c));
    if (state < 0) return false;
  }
  return dfa.Accepting(state);
}

std::shared_ptr<const ByteDfa> Compile(const std::string& pattern) {
  auto dfa = ByteDfa::FromPattern(pattern);
  EXPECT_TRUE(dfa.ok()) << pattern << ": " << dfa.status();
  return dfa.ok() ? *dfa : nullptr;
}

TEST(ByteDfaTest, FixedCases) {
  struct Case {
    const char* pattern;
    std::vector<std::string> yes, no;
  };
  for (const Case& c : {
           Case{"^[a-z]+(-[a-z]+)*$", {"a", "ab-cd-e"}, {"", "-a", "a-", "A", "a--b"}},
           Case{"^\\d{3}-\\d{2,4}$", {"123-45", "123-4567"}, {"12-34", "123-4", "123-45678"}},
           Case{"ab",
                {"ab", "xaby",
                 "\xc3\xa9"
                 "ab"},
                {"a", "ba", "a b"}},
           Case{"^caf\xc3\xa9$", {"caf\xc3\xa9"}, {"cafe", "caf\xc3\xa9s"}},
           Case{"^.$", {"x", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}, {"\n", "", "xy"}},
           Case{"^[^a]$", {"b", "\xc3\xa9"}, {"a", ""}},
           Case{"^\\S+$", {"a\xc3\xa9"}, {"a b", ""}},
           Case{"^(?:x|yz)?$|^w$", {"", "x", "yz", "w"}, {"xw", "y"}},
           Case{"^\\u00e9\\x41$",
                {"\xc3\xa9"
                 "A"},
                {"eA"}},
           Case{"^[\\-.]+$", {"-.-"}, {"a"}},
       }) {
    auto dfa = Compile(c.pattern);
    ASSERT_NE(dfa, nullptr);
    for (const std::string& s : c.yes) EXPECT_TRUE(Matches(*dfa, s)) << c.pattern << " ~ " << s;
    for (const std::string& s : c.no) EXPECT_FALSE(Matches(*dfa, s)) << c.pattern << " !~ " << s;
  }
  for (const char* bad : {"(a", "a)", "[a", "a{2", "*a", "a\\1", "(?!a)", "\\bx", "a^b",
                          "[\xc3\xa9]", "a{300}", "\\p{L}"}) {
    EXPECT_FALSE(ByteDfa::FromPattern(bad).ok()) << bad;
  }
  // Too many states for the automaton is refused, not built.
  EXPECT_FALSE(ByteDfa::FromPattern("^(a|b)*a(a|b){14}$").ok());
}

// Every state the automaton keeps can still reach a match.
TEST(ByteDfaTest, EveryStateCanStillMatch) {
  auto dfa = Compile("^(ab|ac)d{2}$");
  ASSERT_NE(dfa, nullptr);
  for (int32_t s = 0; s < dfa->num_states(); ++s) {
    std::vector<bool> seen(static_cast<size_t>(dfa->num_states()));
    std::vector<int32_t> todo = {s};
    bool reaches = false;
    while (!todo.empty() && !reaches) {
      const int32_t t = todo.back();
      todo.pop_back();
      reaches = dfa->Accepting(t);
      for (int b = 0; b < 256; ++b) {
        const int32_t u = dfa->Next(t, static_cast<uint8_t>(b));
        if (u >= 0 && !seen[size_t(u)]) {
          seen[size_t(u)] = true;
          todo.push_back(u);
        }
      }
    }
    EXPECT_TRUE(reaches) << "state " << s;
  }
}

class RandomPatterns {
 public:
  explicit RandomPatterns(unsigned seed) : rng_(seed) {}

  std::string Pattern() {
    std::string p = rng_() % 2 ? "^" : "";
    p += Alt(2);
    if (rng_() % 2) p += "$";
    return p;
  }

  std::string String() {
    static const char kChars[] = "abc1-. ";
    std::string s;
    for (int n = static_cast<int>(rng_() % 7); n > 0; --n) s += kChars[rng_() % 7];
    return s;
  }

 private:
  std::string Alt(int depth) {
    std::string p = Concat(depth);
    if (rng_() % 4 == 0) p += "|" + Concat(depth);
    return p;
  }
  std::string Concat(int depth) {
    std::string p;
    for (int n = 1 + static_cast<int>(rng_() % 3); n > 0; --n) p += Repeat(depth);
    return p;
  }
  std::string Repeat(int depth) {
    static const char* kQuantifiers[] = {"", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,}", "*?"};
    if (depth > 0 && rng_() % 5 == 0) {
      // A group is repeated only finitely: std::regex backtracks without
      // end on a starred group that can match nothing.
      static const char* kFinite[] = {"", "?", "{2}"};
      return (rng_() % 2 ? "(" : "(?:") + Alt(depth - 1) + ")" + kFinite[rng_() % 3];
    }
    static const char* kAtoms[] = {"a",   "b",   "c",   ".",   "[ab]",   "[^a]",
                                   "\\d", "\\w", "\\s", "\\.", "[a-c1]", "-"};
    return std::string(kAtoms[rng_() % 12]) + kQuantifiers[rng_() % 10];
  }

  std::mt19937 rng_;
};

TEST(ByteDfaTest, AgreesWithEcmaScriptRegexOnRandomPatterns) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  RandomPatterns r(seed);
  int matched = 0, unmatched = 0, too_large = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string pattern = r.Pattern();
    auto dfa = ByteDfa::FromPattern(pattern);
    if (!dfa.ok() && absl::StrContains(dfa.status().message(), "automaton states")) {
      ++too_large;  // nested counts can outgrow kMaxStates: refused, as they should be
      continue;
    }
    ASSERT_TRUE(dfa.ok()) << pattern << ": " << dfa.status();
    const std::regex re(pattern, std::regex::ECMAScript);
    for (int k = 0; k < 40; ++k) {
      const std::string s = r.String();
      const bool want = std::regex_search(s, re);
      ASSERT_EQ(Matches(**dfa, s), want) << "/" << pattern << "/ on '" << s << "'";
      (want ? matched : unmatched) += 1;
    }
  }
  EXPECT_GT(matched, 1000);
  EXPECT_GT(unmatched, 1000);
  EXPECT_LT(too_large, 20);
}

}  // namespace
}  // namespace tandem::structured
