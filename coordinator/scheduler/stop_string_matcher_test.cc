#include "coordinator/scheduler/stop_string_matcher.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

using ::testing::ElementsAre;

// Strict UTF-8 check (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n;
  }
  return true;
}

// Pushes each delta, recording what comes out (and the Flush unless stopped).
std::vector<std::string> PushAll(StopStringMatcher& m,
                                 const std::vector<std::string>& deltas) {
  std::vector<std::string> out;
  for (const std::string& d : deltas) out.push_back(m.Push(d));
  if (!m.stopped()) out.push_back(m.Flush());
  return out;
}

TEST(StopStringMatcherTest, NoStopStringsPassesTextThrough) {
  StopStringMatcher m({});
  EXPECT_THAT(PushAll(m, {"Hello", ", ", "world"}),
              ElementsAre("Hello", ", ", "world", ""));
  EXPECT_EQ(m.text(), "Hello, world");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.stop_index(), -1);
  EXPECT_EQ(m.matched(), "");
}

TEST(StopStringMatcherTest, StopInsideOneDelta) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.Push("abcSTOPdef"), "abc");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_EQ(m.text(), "abc");
}

TEST(StopStringMatcherTest, StopSpanningTokensIsNeverStreamed) {
  StopStringMatcher m({"world"});
  EXPECT_EQ(m.Push("Hello wo"), "Hello ");  // "wo" could start "world"
  EXPECT_EQ(m.num_held_bytes(), 2u);
  EXPECT_EQ(m.Push("rl"), "");
  EXPECT_EQ(m.Push("d!"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "Hello ");
}

TEST(StopStringMatcherTest, FalseAlarmIsReleased) {
  StopStringMatcher m({"###"});
  EXPECT_EQ(m.Push("ab#"), "ab");
  EXPECT_EQ(m.Push("#"), "");
  EXPECT_EQ(m.Push("c"), "##c");
  EXPECT_EQ(m.Push("##"), "");
  EXPECT_EQ(m.Flush(), "##");  // generation ended for another reason
  EXPECT_EQ(m.text(), "ab##c##");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, SelfOverlappingStopString) {
  StopStringMatcher m({"aab"});
  EXPECT_THAT(PushAll(m, {"a", "a", "a", "b", "x"}),
              ElementsAre("", "", "a", "", ""));
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "a");
}

TEST(StopStringMatcherTest, EarliestMatchWinsThenListOrder) {
  StopStringMatcher m({"bc", "abc"});
  EXPECT_EQ(m.Push("xabcd"), "x");
  EXPECT_EQ(m.stop_index(), 1);
  EXPECT_EQ(m.matched(), "abc");

  StopStringMatcher tie({"ab", "abc"});
  EXPECT_EQ(tie.Push("xabcd"), "x");
  EXPECT_EQ(tie.stop_index(), 0);
}

TEST(StopStringMatcherTest, FirstCompletedStopWinsOnline) {
  // After "ab" the stop "b" is complete; "abc" might have matched earlier in
  // the final text, but generation stops as soon as a stop string appears.
  StopStringMatcher m({"abc", "b"});
  EXPECT_EQ(m.Push("ab"), "a");
  EXPECT_EQ(m.stop_index(), 1);
  // Given in one piece, both are complete and the earlier start wins.
  StopStringMatcher n({"abc", "b"});
  EXPECT_EQ(n.Push("abc"), "");
  EXPECT_EQ(n.stop_index(), 0);
}

TEST(StopStringMatcherTest, ShorterStopInsideLongerPartialMatch) {
  // "ab" is held as a prefix of "abcd", but "b" alone is a stop string.
  StopStringMatcher m({"abcd", "b"});
  EXPECT_EQ(m.Push("xa"), "x");
  EXPECT_EQ(m.Push("b"), "a");
  EXPECT_EQ(m.stop_index(), 1);
  EXPECT_EQ(m.text(), "xa");
}

TEST(StopStringMatcherTest, IncludeStopString) {
  StopStringMatcher m({"</s>"}, /*include_stop_string=*/true);
  EXPECT_EQ(m.Push("done</"), "done");
  EXPECT_EQ(m.Push("s>tail"), "</s>");
  EXPECT_EQ(m.text(), "done</s>");
}

TEST(StopStringMatcherTest, EmptyStopStringsAreIgnoredButKeepIndices) {
  StopStringMatcher m({"", "z"});
  EXPECT_EQ(m.Push("abz"), "ab");
  EXPECT_EQ(m.stop_index(), 1);
  EXPECT_EQ(m.matched(), "z");
}

TEST(StopStringMatcherTest, MultiByteStopAcrossTokens) {
  StopStringMatcher m({"世界"});
  EXPECT_EQ(m.Push("你好"), "你好");
  EXPECT_EQ(m.Push("世"), "");  // could be the start of 世界
  EXPECT_EQ(m.Push("界!"), "");
  EXPECT_EQ(m.text(), "你好");
}

TEST(StopStringMatcherTest, MultiByteFalseAlarm) {
  StopStringMatcher m({"世界"});
  EXPECT_EQ(m.Push("你好世"), "你好");
  EXPECT_EQ(m.Push("人"), "世人");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_EQ(m.text(), "你好世人");
}

TEST(StopStringMatcherTest, BytesOfOneCharacterSplitAcrossPushes) {
  // Byte-fallback tokens may split a character; nothing partial is released.
  const std::string text = "ab😀c€d";
  StopStringMatcher m({"€"});
  std::string streamed;
  for (char byte : text) {
    const std::string out = m.Push(std::string(1, byte));
    EXPECT_TRUE(IsValidUtf8(out)) << "released a partial character";
    streamed += out;
  }
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(streamed, "ab😀c");
  EXPECT_EQ(m.text(), "ab😀c");
}

TEST(StopStringMatcherTest, SharedLeadByteIsNotAPartialMatch) {
  StopStringMatcher m({"é"});     // C3 A9
  EXPECT_EQ(m.Push("è"), "è");    // C3 A8: complete and not é
  EXPECT_EQ(m.Push("\xC3"), "");  // incomplete: held
  EXPECT_EQ(m.Push("\xA9x"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "è");
}

TEST(StopStringMatcherTest, IncompleteUtf8Suffix) {
  EXPECT_EQ(IncompleteUtf8Suffix(""), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE2\x82"), 2u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE2\x82\xAC"), 0u);  // complete €
  EXPECT_EQ(IncompleteUtf8Suffix("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Suffix("\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Suffix("\x80\x80"), 0u);  // stray continuation bytes
  EXPECT_EQ(IncompleteUtf8Suffix("\xFF"), 0u);      // never valid
}

// Property test: random text over ASCII and multi-byte characters, random stop
// strings, random splits (at any byte). The streamed pieces concatenate to the
// reference output, each is whole characters, and what has been streamed is
// always a prefix of the final text (so no stop string ever leaks).
TEST(StopStringMatcherTest, RandomSplitsMatchReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::vector<std::string> alphabet = {"a",  "b",  " ", "é",
                                             "世", "界", "😀", "\n"};
  auto random_string = [&](int min_chars, int max_chars) {
    std::string s;
    const int n =
        min_chars + static_cast<int>(rng() % (max_chars - min_chars + 1));
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string text = random_string(0, 30);
    std::vector<std::string> stops;
    const int num_stops = static_cast<int>(rng() % 4);
    for (int i = 0; i < num_stops; ++i) stops.push_back(random_string(1, 3));
    const bool include = rng() % 4 == 0;
    // Random splits at any byte.
    std::vector<size_t> ends;
    for (size_t pos = 0; pos < text.size();) {
      pos = std::min(text.size(), pos + 1 + rng() % 6);
      ends.push_back(pos);
    }
    // Reference: at the first piece after which some stop string is complete,
    // cut at the earliest complete match (ties: list order).
    size_t cut = std::string::npos, cut_len = 0;
    for (size_t end : ends) {
      const std::string_view seen = std::string_view(text).substr(0, end);
      for (const std::string& s : stops) {
        const size_t pos = seen.find(s);
        if (pos < cut) {
          cut = pos;
          cut_len = s.size();
        }
      }
      if (cut != std::string::npos) break;
    }
    const std::string expected =
        cut == std::string::npos
            ? text
            : text.substr(0, cut + (include ? cut_len : 0));

    StopStringMatcher m(stops, include);
    std::string streamed;
    size_t begin = 0;
    for (size_t end : ends) {
      const std::string out = m.Push(text.substr(begin, end - begin));
      begin = end;
      ASSERT_TRUE(IsValidUtf8(out)) << "iter " << iter;
      streamed += out;
      ASSERT_EQ(expected.compare(0, streamed.size(), streamed), 0)
          << "streamed text is not a prefix of the final text, iter " << iter;
    }
    streamed += m.Flush();
    ASSERT_EQ(streamed, expected)
        << "iter " << iter << " text \"" << text << "\"";
    ASSERT_EQ(m.text(), expected);
    ASSERT_EQ(m.stopped(), cut != std::string::npos);
  }
}

}  // namespace
}  // namespace tandem::sched
