#include "coordinator/frontend/tool_call_extractor.h"

#include <cctype>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "coordinator/frontend/tool_call_formats.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {
namespace {

struct Result {
  std::string content;
  std::vector<ToolCall> calls;
};

Result Whole(const std::string& text, ToolCallParser parser = ToolCallParser::kHermes) {
  ToolCallExtractor x(parser);
  Result r;
  r.content = x.Push(text);
  r.content += x.Finish(&r.calls);
  return r;
}

// Each text is no call in `parser`'s format: all of it stays content.
void ExpectAllContent(ToolCallParser parser, const std::vector<std::string>& texts) {
  for (const std::string& text : texts) {
    Result r = Whole(text, parser);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolCallExtractor, HermesCalls) {
  Result r = Whole(
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"Zürich\", \"days\": 2}}\n</tool_call>\n<tool_call>{\"name\": \"search\", "
      "\"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>");
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"location\":\"Zürich\",\"days\":2}");  // the model's order
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
  ExpectAllContent(
      ToolCallParser::kHermes,
      {"plain answer", "<tool_call>not json</tool_call>", "<tool_call>[1, 2]</tool_call>",
       "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>",
       "ok <tool_call>{\"name\": \"f\"}</tool_call><tool_call>{bad</tool_call>", "<tool_call",
       "<tool_call></tool_call>"});
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
  EXPECT_EQ(*ParseToolCallParser("mistral"), ToolCallParser::kMistral);
  EXPECT_EQ(*ParseToolCallParser("llama3_json"), ToolCallParser::kLlama3Json);
  EXPECT_EQ(*ParseToolCallParser("llama4_json"), ToolCallParser::kLlama3Json);
  EXPECT_FALSE(ParseToolCallParser("pythonic").ok());
  EXPECT_EQ(ToolCallToken(ToolCallParser::kMistral), "[TOOL_CALLS]");
  EXPECT_EQ(ToolCallToken(ToolCallParser::kHermes), "");
  EXPECT_EQ(ToolCallToken(ToolCallParser::kLlama3Json), "");
  const nlohmann::ordered_json j = ToolCallsJson({{"id1", "f", "{}"}}, /*with_index=*/true);
  EXPECT_EQ(
      j.dump(),
      R"([{"index":0,"id":"id1","type":"function","function":{"name":"f","arguments":"{}"}}])");
}

bool IsMistralId(const std::string& id) {
  if (id.size() != 9) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

TEST(ToolCallExtractor, MistralListBeforeV11) {
  Result r = Whole(
      "Sure.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"c\"}}, {\"name\": \"now\"}] trailing",
      ToolCallParser::kMistral);
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\",\"unit\":\"c\"}");
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // Mistral's templates refuse any other id form when the call comes back.
  EXPECT_TRUE(IsMistralId(r.calls[0].id)) << r.calls[0].id;
  EXPECT_TRUE(IsMistralId(r.calls[1].id)) << r.calls[1].id;
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // A single object is a list of one.
  r = Whole("[TOOL_CALLS]{\"name\": \"f\", \"arguments\": {\"a\": \"]}\"}}",
            ToolCallParser::kMistral);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"a\":\"]}\"}");
}

TEST(ToolCallExtractor, MistralNamedCallsFromV11) {
  Result r = Whole(
      "Let me see.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]add{\"a\": 3.5, "
      "\"b\": {\"c\": \"}\"}} done[TOOL_CALLS]lookup[CALL_ID]a1b2c3d4e[ARGS]{\"q\": 1",
      ToolCallParser::kMistral);
  EXPECT_EQ(r.content, "Let me see.");
  ASSERT_EQ(r.calls.size(), 3u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Paris\"}");  // as written
  EXPECT_EQ(r.calls[1].name, "add");
  EXPECT_EQ(r.calls[1].arguments, "{\"a\": 3.5, \"b\": {\"c\": \"}\"}}");  // trailing text dropped
  // Cut-off arguments still make a call, as in vLLM (the model sees it tried).
  EXPECT_EQ(r.calls[2].name, "lookup");
  EXPECT_EQ(r.calls[2].arguments, "{\"q\": 1");
  for (const ToolCall& c : r.calls) EXPECT_TRUE(IsMistralId(c.id)) << c.id;
}

TEST(ToolCallExtractor, MistralNotCallsStayContent) {
  ExpectAllContent(
      ToolCallParser::kMistral,
      {"no calls here", "[TOOL_CALLS]", "[TOOL_CALLS] [1, 2]", "[TOOL_CALLS] [{\"name\": 1}]",
       "[TOOL_CALLS] [{\"name\": \"f\"}", "[TOOL_CALLS] []", "[TOOL_CALLS]just words",
       "[TOOL_CALLS] [{\"name\": \"f\"}][TOOL_CALLS] [{\"name\": \"g\"}]", "x [TOOL_CALL",
       "<tool_call>{\"name\": \"f\"}</tool_call>"});
}

TEST(ToolCallExtractor, Llama3JsonCalls) {
  Result r = Whole(
      "  <|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Zürich\"}}; "
      "{\"name\": \"search\", \"arguments\": {\"q\": \"a;b\"}}\n",
      ToolCallParser::kLlama3Json);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Zürich\"}");
  EXPECT_EQ(r.calls[1].name, "search");
  EXPECT_EQ(r.calls[1].arguments, "{\"q\":\"a;b\"}");
  EXPECT_EQ(r.calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  // Without the tag (skip_special_tokens drops it) and with text after.
  r = Whole("{\"name\": \"f\", \"parameters\": {}} I called f.", ToolCallParser::kLlama3Json);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallExtractor, Llama3JsonNotCallsStayContent) {
  ExpectAllContent(
      ToolCallParser::kLlama3Json,
      {"The answer is {\"name\": \"f\", \"parameters\": {}}", "{\"answer\": 42}", "{\"name\": 1}",
       "{\"name\": \"f\"}; {\"x\": 1}", "{\"name\": \"f\", \"parameters\": {", "{ not json }", "  ",
       "", "<|python_tag|>brave_search.call(query=\"x\")", "<|python", "[1, 2]",
       "<tool_call>{\"name\": \"f\"}</tool_call>"});
}

// tool_choice "required" or named: the whole answer is a list of calls,
// held back until it is whole; one cut off by max_tokens stays content.
TEST(ToolCallExtractor, ForcedCalls) {
  Result r = Whole(
      "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}, "
      "{\"name\": \"search\", \"parameters\": {}}]",
      ToolCallParser::kForced);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  ExpectAllContent(ToolCallParser::kForced,
                   {"[{\"name\": \"f\", \"parameters\": {\"a\": ", "[]", "", "[1]"});
}

// In a stream, forced calls come out as deltas while they are written: a
// whole list ends as calls (finish reason "tool_calls"); one cut off after
// a call was announced has been streamed as far as it got; one cut off
// before any call was named gives its text back as content.
TEST(ToolCallExtractor, ForcedCallsStreamed) {
  {
    ToolCallExtractor e(ToolCallParser::kForced);
    std::vector<ToolCallDelta> d;
    EXPECT_EQ(e.Push("[{\"name\": \"f\", \"param", &d), "");
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].name, "f");
    EXPECT_EQ(e.Push("eters\": {\"a\": 1}}]", &d), "");
    std::vector<ToolCall> calls;
    EXPECT_EQ(e.Finish(&calls), "");
    EXPECT_TRUE(calls.empty());
    EXPECT_TRUE(e.streamed_calls());
  }
  {
    ToolCallExtractor e(ToolCallParser::kForced);
    std::vector<ToolCallDelta> d;
    EXPECT_EQ(e.Push("[{\"name\": \"f\", \"parameters\": {\"a\": ", &d), "");
    std::vector<ToolCall> calls;
    EXPECT_EQ(e.Finish(&calls), "");
    EXPECT_TRUE(calls.empty());
    EXPECT_FALSE(e.streamed_calls());
  }
  {
    ToolCallExtractor e(ToolCallParser::kForced);
    std::vector<ToolCallDelta> d;
    EXPECT_EQ(e.Push("[{\"na", &d), "");
    EXPECT_TRUE(d.empty());
    std::vector<ToolCall> calls;
    EXPECT_EQ(e.Finish(&calls), "[{\"na");
    EXPECT_FALSE(e.streamed_calls());
  }
}

// JsonContainerEnd finds the end of any JSON object or array, whatever text
// follows, and nothing where the value is cut off.
TEST(ToolCallFormats, JsonContainerEndMatchesTheParser) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << std::endl;
  std::mt19937 rng(seed);
  const std::vector<std::string> strings = {"a",    "}", "]",       "\\\"", "{[",
                                            "\\\\", "é", "\\u007d", ""};
  std::function<nlohmann::ordered_json(int)> value = [&](int depth) -> nlohmann::ordered_json {
    const int kind = depth > 3 ? static_cast<int>(rng() % 3) : static_cast<int>(rng() % 5);
    switch (kind) {
      case 0:
        return static_cast<int>(rng() % 100);
      case 1:
        return nlohmann::ordered_json::parse("\"" + strings[rng() % strings.size()] + "\"");
      case 2:
        return nullptr;
      case 3: {
        nlohmann::ordered_json a = nlohmann::ordered_json::array();
        for (int n = static_cast<int>(rng() % 4); n > 0; --n) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (int n = static_cast<int>(rng() % 4); n > 0; --n) {
          o[strings[rng() % strings.size()]] = value(depth + 1);
        }
        return o;
      }
    }
  };
  for (int round = 0; round < 2000; ++round) {
    nlohmann::ordered_json v = value(0);
    if (!v.is_structured()) v = nlohmann::ordered_json::array({v});
    const std::string dumped = v.dump(rng() % 2 ? -1 : 1);
    const std::string text = "x" + dumped + strings[rng() % strings.size()] + "]}";
    ASSERT_EQ(JsonContainerEnd(text, 1), 1 + dumped.size()) << "seed " << seed << " " << text;
    const std::string cut = "x" + dumped.substr(0, rng() % dumped.size());
    ASSERT_EQ(JsonContainerEnd(cut, 1), std::string::npos) << "seed " << seed << " " << cut;
  }
  EXPECT_EQ(JsonContainerEnd("\"x\"", 0), std::string::npos);
  EXPECT_EQ(JsonContainerEnd("{}", 2), std::string::npos);
}

// Streamed in random pieces: the released content and the calls equal the
// whole answer's, and no content is released past the first "<tool_call>".
void CheckAnyChunking(ToolCallParser parser, const std::vector<std::string>& atoms,
                      const std::function<size_t(const std::string&)>& calls_start) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << std::endl;
  std::mt19937 rng(seed);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    for (int n = static_cast<int>(rng() % 7); n > 0; --n) text += atoms[rng() % atoms.size()];
    const Result whole = Whole(text, parser);
    ToolCallExtractor x(parser);
    std::string streamed;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 5;
      streamed += x.Push(std::string_view(text).substr(i, n));
      i += n;
    }
    const size_t start = calls_start(text);
    ASSERT_LE(streamed.size(), start == std::string::npos ? text.size() : start)
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

// Streamed in random pieces: the released content and the calls equal the
// whole answer's, and no content is released past where the calls start.
TEST(ToolCallExtractor, AnyChunkingGivesTheWholeResult) {
  CheckAnyChunking(ToolCallParser::kHermes,
                   {"<tool_call>", "</tool_call>", "<", "<tool", "_call>", "{\"name\": \"f\"}",
                    "{\"name\": \"g\", \"arguments\": {\"a\": [1]}}", "text", " ", "\n", "{", "é"},
                   [](const std::string& t) { return t.find("<tool_call>"); });
  CheckAnyChunking(ToolCallParser::kMistral,
                   {"[TOOL_CALLS]", "[TOOL", "_CALLS]", "[", " [", "]", "{\"name\": \"f\"}", ",",
                    "[ARGS]", "get", "{\"a\": [1]}", "text", " ", "é"},
                   [](const std::string& t) { return t.find("[TOOL_CALLS]"); });
  CheckAnyChunking(ToolCallParser::kLlama3Json,
                   {"<|python_tag|>", "<|py", "thon_tag|>", "{\"name\": \"f\"}", "; ",
                    "{\"name\": \"g\", \"parameters\": {\"a\": [1]}}", "text", " ", "\n", "{", "é"},
                   [](const std::string& t) -> size_t {
                     const size_t b = t.find_first_not_of(" \t\r\n");
                     if (b == std::string::npos) return std::string::npos;
                     const bool calls = t[b] == '{' || t.compare(b, 14, "<|python_tag|>") == 0;
                     return calls ? 0 : std::string::npos;
                   });
}

}  // namespace
}  // namespace tandem::frontend
