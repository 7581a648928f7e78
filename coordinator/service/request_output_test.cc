#include "coordinator/service/request_output.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::coord {
namespace {

const Tokenizer& Llama2() {
  static const Tokenizer* tok = [] {
    const std::string dir =
        std::string(TANDEM_TESTDATA_DIR) + "/tokenizers/llama2/";
    auto t = Tokenizer::FromHfFiles(dir + "tokenizer.json",
                                    dir + "tokenizer_config.json");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? t->release() : nullptr;
  }();
  return *tok;
}

std::vector<int32_t> Ids(const std::string& text) {
  return Llama2().Encode(text, /*add_bos=*/false);
}

// Feeds `ids` one at a time (the last with `last_finish`); returns the
// events, the final one included.
std::vector<GenerationEvent> Feed(RequestOutput& out,
                                  const std::vector<int32_t>& ids,
                                  std::optional<FinishReason> last_finish) {
  std::vector<GenerationEvent> events;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool last = i + 1 == ids.size();
    const auto finish =
        out.AddToken(ids[i], std::nullopt, last ? last_finish : std::nullopt);
    if (finish.has_value()) {
      events.push_back(out.TakeFinalEvent(*finish));
      return events;
    }
    events.push_back(out.TakeEvent());
  }
  return events;
}

std::string Joined(const std::vector<GenerationEvent>& events) {
  std::string s;
  for (const auto& e : events) s += e.text;
  return s;
}

TEST(RequestOutput, WithoutTokenizerCarriesIdsOnly) {
  GenerationParams p;
  p.max_tokens = 3;
  RequestOutput out(5, /*num_prompt_tokens=*/4, p, nullptr);
  EXPECT_FALSE(out.AddToken(11, std::nullopt, std::nullopt).has_value());
  GenerationEvent e = out.TakeEvent();
  EXPECT_EQ(e.request_id, 5);
  EXPECT_EQ(e.token_ids, (std::vector<int32_t>{11}));
  EXPECT_EQ(e.text, "");
  EXPECT_TRUE(e.logprobs.empty());
  EXPECT_FALSE(e.finished);
  EXPECT_EQ(out.AddToken(12, std::nullopt, FinishReason::kLength),
            FinishReason::kLength);
  e = out.TakeFinalEvent(FinishReason::kLength);
  EXPECT_TRUE(e.finished);
  EXPECT_EQ(e.finish_reason, FinishReason::kLength);
  EXPECT_EQ(e.token_ids, (std::vector<int32_t>{12}));
  EXPECT_EQ(e.usage.prompt_tokens, 4);
  EXPECT_EQ(e.usage.completion_tokens, 2);
  EXPECT_TRUE(e.status.ok());
}

TEST(RequestOutput, TextDeltasJoinToTheDecodedText) {
  const std::string text = "Caf\xC3\xA9 costs \xE2\x82\xAC" "5 \xF0\x9F\x98\x80 ok";
  const std::vector<int32_t> ids = Ids(text);
  RequestOutput out(1, 1, GenerationParams(), &Llama2());
  const auto events = Feed(out, ids, FinishReason::kLength);
  EXPECT_EQ(Joined(events), Llama2().Decode(ids));
  EXPECT_EQ(out.text(), Llama2().Decode(ids));
  for (const auto& e : events) EXPECT_EQ(e.token_ids.size(), 1u);
  EXPECT_TRUE(events.back().finished);
}

TEST(RequestOutput, StopStringIsCutAndNeverStreamed) {
  GenerationParams p;
  p.stop = {"cat s"};
  const std::vector<int32_t> ids = Ids("Hello world! The cat sat on the mat.");
  RequestOutput out(1, 1, p, &Llama2());
  const auto events = Feed(out, ids, std::nullopt);
  ASSERT_FALSE(events.empty());
  const GenerationEvent& last = events.back();
  ASSERT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(last.stop_string, "cat s");
  EXPECT_FALSE(last.stop_token_id.has_value());
  EXPECT_EQ(Joined(events), "Hello world! The ");
  for (const auto& e : events) {
    EXPECT_EQ(e.text.find("cat"), std::string::npos) << e.text;
  }
  // Generation stopped at the token completing the stop string.
  EXPECT_LT(out.num_generated(), static_cast<int64_t>(ids.size()));
  // Later tokens are ignored.
  EXPECT_EQ(out.AddToken(ids.back(), std::nullopt, std::nullopt),
            FinishReason::kStop);
}

TEST(RequestOutput, IncludeStopStringKeepsIt) {
  GenerationParams p;
  p.stop = {"world"};
  p.include_stop_str_in_output = true;
  RequestOutput out(1, 1, p, &Llama2());
  const auto events = Feed(out, Ids("Hello world! again"), std::nullopt);
  EXPECT_EQ(Joined(events), "Hello world");
  EXPECT_EQ(events.back().stop_string, "world");
}

TEST(RequestOutput, StopTokenEndsWithoutText) {
  std::vector<int32_t> ids = Ids("Hello world");
  ids.push_back(2);  // </s>
  RequestOutput out(1, 1, GenerationParams(), &Llama2());
  const auto events = Feed(out, ids, FinishReason::kStop);
  EXPECT_EQ(Joined(events), "Hello world");
  EXPECT_EQ(events.back().stop_token_id, 2);
  EXPECT_EQ(events.back().token_ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(events.back().usage.completion_tokens,
            static_cast<int64_t>(ids.size()));
}

TEST(RequestOutput, HeldBackTextIsReleasedAtLength) {
  // "wor" could begin the stop string "world": held until the end.
  GenerationParams p;
  p.stop = {"world"};
  RequestOutput out(1, 1, p, &Llama2());
  const std::vector<int32_t> ids = Ids("Hello wor");
  const auto events = Feed(out, ids, FinishReason::kLength);
  EXPECT_EQ(Joined(events), Llama2().Decode(ids));
  EXPECT_EQ(events.back().finish_reason, FinishReason::kLength);
}

TEST(RequestOutput, LogprobsAreParallelToTokens) {
  GenerationParams p;
  p.top_logprobs = 2;
  RequestOutput out(1, 1, p, nullptr);
  TokenLogprob lp{7, -0.25f, {{7, -0.25f}, {8, -1.5f}}};
  out.AddToken(7, lp, std::nullopt);
  out.AddToken(9, std::nullopt, std::nullopt);  // none reported: NaN
  GenerationEvent e = out.TakeEvent();
  ASSERT_EQ(e.logprobs.size(), 2u);
  EXPECT_EQ(e.logprobs[0].id, 7);
  EXPECT_FLOAT_EQ(e.logprobs[0].logprob, -0.25f);
  EXPECT_EQ(e.logprobs[0].top.size(), 2u);
  EXPECT_EQ(e.logprobs[1].id, 9);
  EXPECT_TRUE(std::isnan(e.logprobs[1].logprob));
}

TEST(RequestOutput, QueueTimeGoesInTheFirstEventWithTokens) {
  RequestOutput out(1, 1, GenerationParams(), nullptr);
  out.set_queue_time(0.5);
  out.set_queue_time(0.9);  // the first one stays
  out.AddToken(11, std::nullopt, std::nullopt);
  EXPECT_DOUBLE_EQ(out.TakeEvent().queue_time_s, 0.5);
  out.AddToken(12, std::nullopt, std::nullopt);
  EXPECT_LT(out.TakeEvent().queue_time_s, 0);
}

TEST(RequestOutput, AbortFinalEventHasNoTokens) {
  RequestOutput out(3, 2, GenerationParams(), &Llama2());
  out.AddToken(Ids("Hi")[0], std::nullopt, std::nullopt);
  (void)out.TakeEvent();
  GenerationEvent e = out.TakeFinalEvent(FinishReason::kAbort);
  EXPECT_TRUE(e.finished);
  EXPECT_EQ(e.finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(e.token_ids.empty());
  EXPECT_EQ(e.usage.completion_tokens, 1);
}

}  // namespace
}  // namespace tandem::coord
