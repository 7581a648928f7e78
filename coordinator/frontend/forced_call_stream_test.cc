// Forced tool calls read as they stream: against nlohmann's parse of the
// whole answer, on random answers (random parameters, random whitespace
// between tokens, random splits into pieces; fresh each run, the seed
// printed on failure). Each call's pieces start with its id and name, and
// its argument pieces add up to the parameters' text without the
// whitespace between tokens: the arguments ParseForcedCalls gives.
#include "coordinator/frontend/forced_call_stream.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {
namespace {

using ojson = nlohmann::ordered_json;

class RandomAnswers {
 public:
  explicit RandomAnswers(unsigned seed) : rng_(seed) {}

  ojson Value(int depth) {
    switch (rng_() % (depth > 0 ? 8 : 5)) {
      case 0: {
        static const char* kStrings[] = {"Paris", "a}b\"{[",   "back\\slash", "caf\xc3\xa9",
                                         "",      "new\nline", "\x01"};
        return kStrings[rng_() % 7];
      }
      case 1:
        return static_cast<int>(rng_() % 2001) - 1000;
      case 2:
        return static_cast<double>(static_cast<int>(rng_() % 2001) - 1000) / 8;
      case 3:
        return rng_() % 2 ? ojson(true) : ojson(nullptr);
      case 4:
        return false;
      case 5:
      case 6: {
        ojson o = ojson::object();
        for (int i = static_cast<int>(rng_() % 4); i > 0; --i) {
          o["k" + std::to_string(rng_() % 10)] = Value(depth - 1);
        }
        return o;
      }
      default: {
        ojson a = ojson::array();
        for (int i = static_cast<int>(rng_() % 4); i > 0; --i) a.push_back(Value(depth - 1));
        return a;
      }
    }
  }

  // [{"name", "parameters"}...] written with random whitespace between
  // tokens (never inside them).
  std::string Answer(ojson* calls) {
    *calls = ojson::array();
    for (int i = 1 + static_cast<int>(rng_() % 3); i > 0; --i) {
      ojson call;
      call["name"] = rng_() % 4 ? "get_weather" : "na\"me";
      call["parameters"] = rng_() % 4 ? Value(3) : ojson::object();
      calls->push_back(std::move(call));
    }
    const std::string compact = calls->dump();
    std::string out;
    bool in_string = false, escaped = false;
    for (char c : compact) {
      if (!in_string && rng_() % 3 == 0) out += " \n\t "[rng_() % 4];
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
      }
    }
    return out;
  }

  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

TEST(ForcedCallStream, PiecesAddUpToTheWholeAnswersCalls) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  RandomAnswers r(seed);
  for (int n = 0; n < 300; ++n) {
    ojson want;
    const std::string text = r.Answer(&want);
    ForcedCallStream stream;
    std::vector<ToolCallDelta> deltas;
    for (size_t at = 0; at < text.size();) {
      const size_t len = 1 + r.rng()() % 7;
      stream.Push(std::string_view(text).substr(at, len), &deltas);
      at += len;
    }
    ASSERT_TRUE(stream.complete()) << text;
    ASSERT_EQ(stream.calls().size(), want.size()) << text;
    std::vector<std::string> args(want.size()), names(want.size()), ids(want.size());
    for (const ToolCallDelta& d : deltas) {
      ASSERT_LT(static_cast<size_t>(d.index), want.size());
      const size_t i = static_cast<size_t>(d.index);
      if (ids[i].empty()) {
        // A call's first piece names it; the later ones do not.
        ASSERT_FALSE(d.id.empty()) << text;
        ids[i] = d.id;
        names[i] = d.name;
      } else {
        ASSERT_TRUE(d.id.empty() && d.name.empty()) << text;
      }
      args[i] += d.arguments;
    }
    std::vector<ToolCall> whole;
    ASSERT_TRUE(ParseForcedCalls(text, &whole)) << text;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(names[i], want[i]["name"].get<std::string>()) << text;
      EXPECT_EQ(ids[i], stream.calls()[i].id);
      EXPECT_EQ(args[i], want[i]["parameters"].dump()) << text;
      EXPECT_EQ(whole[i].arguments, args[i]) << text;
      EXPECT_EQ(whole[i].name, names[i]) << text;
    }
  }
}

// The name is out before the arguments are: a client sees the call start.
TEST(ForcedCallStream, ACallIsAnnouncedOnceNamed) {
  ForcedCallStream s;
  std::vector<ToolCallDelta> d;
  s.Push("[{\"name\": \"get_weather\"", &d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].index, 0);
  EXPECT_EQ(d[0].name, "get_weather");
  EXPECT_EQ(d[0].arguments, "");
  EXPECT_EQ(d[0].id.rfind("chatcmpl-tool-", 0), 0u);
  d.clear();
  s.Push(", \"parameters\": {\"city\": \"Pa", &d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].arguments, "{\"city\":\"Pa");
  EXPECT_TRUE(d[0].id.empty());
  d.clear();
  s.Push("ris\"}}, {\"name\": \"now\", \"parameters\": {}}", &d);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].arguments, "ris\"}");
  EXPECT_EQ(d[1].index, 1);
  EXPECT_EQ(d[1].name, "now");
  EXPECT_EQ(d[1].arguments, "{}");
  EXPECT_FALSE(s.complete());
  d.clear();
  s.Push(" ]", &d);
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(s.complete());
}

// A character split between pieces (a backend may hand out bytes) goes out
// whole, in the later piece.
TEST(ForcedCallStream, PiecesHoldWholeCharacters) {
  ForcedCallStream s;
  std::vector<ToolCallDelta> d;
  s.Push("[{\"name\": \"f\", \"parameters\": {\"a\": \"Z\xc3", &d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].arguments, "{\"a\":\"Z");
  s.Push("\xbc\xe2\x82", &d);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].arguments, "\xc3\xbc");
  s.Push("\xac\"}}]", &d);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[2].arguments, "\xe2\x82\xac\"}");
}

// Text of another shape stops the reader; a list cut off is not complete.
TEST(ForcedCallStream, OtherTextIsNotCalls) {
  for (const char* text : {"{\"name\": \"f\"}", "[1]", "[{\"name\": 3}]", "[{\"parameters\": {}}]",
                           "[] x", "[{\"name\": \"f\", \"parameters\": {}}] ]"}) {
    ForcedCallStream s;
    std::vector<ToolCallDelta> d;
    s.Push(text, &d);
    EXPECT_FALSE(s.complete()) << text;
    std::vector<ToolCall> calls;
    EXPECT_FALSE(ParseForcedCalls(text, &calls)) << text;
  }
  ForcedCallStream cut;
  std::vector<ToolCallDelta> d;
  cut.Push("[{\"name\": \"f\", \"parameters\": {\"a\": [1, ", &d);
  EXPECT_FALSE(cut.complete());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].arguments, "{\"a\":[1,");
}

}  // namespace
}  // namespace tandem::frontend
