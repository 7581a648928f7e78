#include "coordinator/frontend/tool_call_extractor.h"

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::frontend {
namespace {

struct Result {
  std::string content;
  std::vector<ToolCall> calls;
};

Result Whole(const std::string& text) {
  ToolCallExtractor x(ToolCallParser::kHermes);
  Result r;
  r.content = x.Push(text);
  r.content += x.Finish(&r.calls);
  return r;
}

TEST(ToolCallExtractor, HermesCalls) {
  Result r = Whole(
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"Zürich\", \"days\": 2}}\n</tool_call>\n<tool_call>{\"name\": \"search\", "
      "\"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>");
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"days\":2,\"location\":\"Zürich\"}");
  EXPECT_EQ(r.calls[1].name, "search");
  EXPECT_EQ(r.calls[1].arguments, "{\"q\": 1}");  // a string is passed through
  EXPECT_EQ(r.calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(r.calls[0].id.size(), std::string("chatcmpl-tool-").size() + 32);
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
}

TEST(ToolCallExtractor, CutOffAndMissingArguments) {
  // The last block cut off before </tool_call> still counts (vLLM's regex).
  Result r = Whole("<tool_call>{\"name\": \"f\"}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.content, "");
  // Text after the blocks is dropped.
  r = Whole("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> trailing");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallExtractor, NotCallsStayContent) {
  for (const std::string text :
       {"plain answer", "<tool_call>not json</tool_call>", "<tool_call>[1, 2]</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>",
        "ok <tool_call>{\"name\": \"f\"}</tool_call><tool_call>{bad</tool_call>", "<tool_call",
        "<tool_call></tool_call>"}) {
    Result r = Whole(text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
  ToolCallExtractor none(ToolCallParser::kNone);
  std::vector<ToolCall> calls;
  EXPECT_EQ(none.Push("<tool_call>{\"name\": \"f\"}</tool_call>"),
            "<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(none.Finish(&calls), "");
  EXPECT_TRUE(calls.empty());
}

TEST(ToolCallExtractor, ParserNamesAndJson) {
  EXPECT_EQ(*ParseToolCallParser(""), ToolCallParser::kNone);
  EXPECT_EQ(*ParseToolCallParser("hermes"), ToolCallParser::kHermes);
  EXPECT_FALSE(ParseToolCallParser("mistral").ok());
  const nlohmann::ordered_json j = ToolCallsJson({{"id1", "f", "{}"}}, /*with_index=*/true);
  EXPECT_EQ(
      j.dump(),
      R"([{"index":0,"id":"id1","type":"function","function":{"name":"f","arguments":"{}"}}])");
}

// Streamed in random pieces: the released content and the calls equal the
// whole answer's, and no content is released past the first "<tool_call>".
TEST(ToolCallExtractor, AnyChunkingGivesTheWholeResult) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << std::endl;
  std::mt19937 rng(seed);
  const std::vector<std::string> atoms = {"<tool_call>",
                                          "</tool_call>",
                                          "<",
                                          "<tool",
                                          "_call>",
                                          "{\"name\": \"f\"}",
                                          "{\"name\": \"g\", \"arguments\": {\"a\": [1]}}",
                                          "text",
                                          " ",
                                          "\n",
                                          "{",
                                          "é"};
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    for (int n = static_cast<int>(rng() % 7); n > 0; --n) text += atoms[rng() % atoms.size()];
    const Result whole = Whole(text);
    ToolCallExtractor x(ToolCallParser::kHermes);
    std::string streamed;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 5;
      streamed += x.Push(std::string_view(text).substr(i, n));
      i += n;
    }
    const size_t open = text.find("<tool_call>");
    ASSERT_LE(streamed.size(), open == std::string::npos ? text.size() : open)
        << "seed " << seed << " text '" << text << "'";
    std::vector<ToolCall> calls;
    streamed += x.Finish(&calls);
    ASSERT_EQ(streamed, whole.content) << "seed " << seed << " text '" << text << "'";
    ASSERT_EQ(calls.size(), whole.calls.size()) << "seed " << seed << " text '" << text << "'";
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].name, whole.calls[i].name);
      EXPECT_EQ(calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

}  // namespace
}  // namespace tandem::frontend
