#include "coordinator/frontend/reasoning_splitter.h"

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::frontend {
namespace {

ReasoningPiece Whole(ReasoningParser p, const std::string& text) {
  ReasoningSplitter s(p);
  ReasoningPiece a = s.Push(text), b = s.Flush();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

TEST(ReasoningSplitter, Qwen3) {
  const auto p = ReasoningParser::kQwen3;
  ReasoningPiece r = Whole(p, "<think>\nLet me add.\n</think>\n\nIt is 4.");
  EXPECT_EQ(r.reasoning, "\nLet me add.\n");
  EXPECT_EQ(r.content, "\n\nIt is 4.");
  // Thinking off (the template closed it): all content, a later tag included.
  r = Whole(p, "It is 4. <think>x</think>");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "It is 4. <think>x</think>");
  // Whitespace before the tag; cut off before "</think>": all reasoning.
  r = Whole(p, "\n<think>still thinking </thi");
  EXPECT_EQ(r.reasoning, "still thinking </thi");
  EXPECT_EQ(r.content, "");
  // Only "</think>" closes; a second one is content.
  r = Whole(p, "<think>a</think>b</think>");
  EXPECT_EQ(r.reasoning, "a");
  EXPECT_EQ(r.content, "b</think>");
  r = Whole(p, "<thin");  // a partial tag that never completes
  EXPECT_EQ(r.content, "<thin");
  r = Whole(p, "");
  EXPECT_EQ(r.reasoning + r.content, "");
}

TEST(ReasoningSplitter, DeepSeekR1OpensInReasoning) {
  const auto p = ReasoningParser::kDeepSeekR1;
  ReasoningPiece r = Whole(p, "Add them.\n</think>\n\n4");
  EXPECT_EQ(r.reasoning, "Add them.\n");
  EXPECT_EQ(r.content, "\n\n4");
  r = Whole(p, "<think>again</think>ok");
  EXPECT_EQ(r.reasoning, "again");
  EXPECT_EQ(r.content, "ok");
  r = Whole(p, "no end");
  EXPECT_EQ(r.reasoning, "no end");
  EXPECT_EQ(r.content, "");
}

TEST(ReasoningSplitter, NoneIsAllContent) {
  ReasoningPiece r = Whole(ReasoningParser::kNone, "<think>a</think>b");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "<think>a</think>b");
}

TEST(ReasoningSplitter, ParserNames) {
  EXPECT_EQ(*ParseReasoningParser(""), ReasoningParser::kNone);
  EXPECT_EQ(*ParseReasoningParser("qwen3"), ReasoningParser::kQwen3);
  EXPECT_EQ(*ParseReasoningParser("deepseek_r1"), ReasoningParser::kDeepSeekR1);
  EXPECT_FALSE(ParseReasoningParser("hermes").ok());
}

// Streamed in random pieces, the deltas add up to the whole answer's split.
TEST(ReasoningSplitter, AnyChunkingGivesTheWholeSplit) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << std::endl;
  std::mt19937 rng(seed);
  const std::vector<std::string> atoms = {"<think>", "</think>", "<", "</", "<th",
                                          "</thi",   "think>",   "a", "bc", " ",
                                          "\n",      "\n\n",     ">", "é"};
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    for (int n = static_cast<int>(rng() % 8); n > 0; --n) text += atoms[rng() % atoms.size()];
    for (auto p : {ReasoningParser::kQwen3, ReasoningParser::kDeepSeekR1}) {
      const ReasoningPiece whole = Whole(p, text);
      EXPECT_EQ(whole.reasoning.size() + whole.content.size() <= text.size(), true);
      ReasoningSplitter s(p);
      ReasoningPiece sum;
      for (size_t i = 0; i < text.size();) {
        const size_t n = 1 + rng() % 4;
        ReasoningPiece d = s.Push(std::string_view(text).substr(i, n));
        sum.reasoning += d.reasoning;
        sum.content += d.content;
        i += n;
      }
      ReasoningPiece d = s.Flush();
      sum.reasoning += d.reasoning;
      sum.content += d.content;
      ASSERT_EQ(sum.reasoning, whole.reasoning) << "seed " << seed << " text '" << text << "'";
      ASSERT_EQ(sum.content, whole.content) << "seed " << seed << " text '" << text << "'";
    }
  }
}

}  // namespace
}  // namespace tandem::frontend
