// Text streaming with a real tokenizer (Llama-2's, from tests/data) against
// the fake worker: deltas join to the decoded text, stop strings are cut and
// never streamed (even split over tokens), stop tokens add no text.
#include <memory>
#include <string>
#include <vector>

#include "coordinator/service/step_driver.h"
#include "coordinator/service/testing/driver_fixture.h"
#include "coordinator/structured/schema_grammar.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::coord {
namespace {

using testing::RequestLog;

std::shared_ptr<const Tokenizer> Llama2() {
  static const std::shared_ptr<const Tokenizer> tok = [] {
    const std::string dir =
        std::string(TANDEM_TESTDATA_DIR) + "/tokenizers/llama2/";
    auto t = Tokenizer::FromHfFiles(dir + "tokenizer.json",
                                    dir + "tokenizer_config.json");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::shared_ptr<const Tokenizer>(*std::move(t)) : nullptr;
  }();
  return tok;
}

class StepDriverTextTest : public testing::DriverFixture {
 protected:
  void SetUp() override {
    ASSERT_NE(Llama2(), nullptr);
    StepDriverConfig c = BaseConfig();
    c.tokenizer = Llama2();
    c.vocab_size = Llama2()->vocab_size();
    c.eos_token_ids = Llama2()->eos_ids();
    StartCoordinator(c);
    worker_ = AddWorker({Llama2()->vocab_size()});
  }
  std::vector<int32_t> Ids(const std::string& text) const {
    return Llama2()->Encode(text, /*add_bos=*/false);
  }
  testing::FakeWorkerServer* worker_ = nullptr;
};

TEST_F(StepDriverTextTest, TextDeltasJoinToTheDecodedText) {
  const std::vector<int32_t> prompt = {1, 15043};
  const std::vector<int32_t> reply =
      Ids("Caf\xC3\xA9 \xE2\x82\xAC" "5, \xF0\x9F\x98\x80 fine.");
  std::vector<int32_t> script = reply;
  script.push_back(Llama2()->eos_ids()[0]);
  worker_->worker().Script(prompt, script);
  const int64_t id = Submit(prompt, Greedy(50));
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.tokens, script);
  EXPECT_EQ(log.text, Llama2()->Decode(reply));
  EXPECT_EQ(log.last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(log.last().stop_token_id, Llama2()->eos_ids()[0]);
  EXPECT_FALSE(log.last().stop_string.has_value());
}

TEST_F(StepDriverTextTest, StopStringIsCutNeverStreamedAndFreesKv) {
  const std::vector<int32_t> prompt = {1, 22557};
  const std::vector<int32_t> reply =
      Ids("Hello world! The cat sat on the mat. And then more text follows.");
  worker_->worker().Script(prompt, reply);
  GenerationParams p = Greedy(60);
  p.stop = {"cat sat", "never"};
  const int64_t id = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.text, "Hello world! The ");
  for (const GenerationEvent& e : log.events) {
    EXPECT_EQ(e.text.find("cat"), std::string::npos) << e.text;
  }
  EXPECT_EQ(log.last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(log.last().stop_string, "cat sat");
  // Generation stopped at the token that completed the stop string.
  EXPECT_LT(log.tokens.size(), reply.size());
  EXPECT_TRUE(std::equal(log.tokens.begin(), log.tokens.end(), reply.begin()));
  // Its KV is freed: the next plan says so.
  const int64_t next = Submit({1, 15043}, Greedy(2));
  ASSERT_TRUE(events_.WaitDone(next));
  const std::vector<int64_t> freed = worker_->worker().freed();
  EXPECT_NE(std::find(freed.begin(), freed.end(), id), freed.end());
  EXPECT_EQ(driver_->metrics().gpu_kv_blocks_used, 0);
}

TEST_F(StepDriverTextTest, IncludeStopStringAndLengthFlush) {
  const std::vector<int32_t> prompt = {1, 22557, 29991};
  const std::vector<int32_t> reply = Ids("one two three four");
  worker_->worker().Script(prompt, reply);
  GenerationParams p = Greedy(60);
  p.stop = {"three"};
  p.include_stop_str_in_output = true;
  const int64_t with_stop = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(with_stop));
  EXPECT_EQ(events_.Get(with_stop).text, "one two three");

  // "thr" might begin "three" and is held back, then released at the end.
  const std::vector<int32_t> partial = Ids("one two thr");
  GenerationParams q = Greedy(static_cast<int64_t>(partial.size()));
  q.stop = {"three"};
  std::vector<int32_t> prompt2 = {1, 22557, 29992};
  worker_->worker().Script(prompt2, partial);
  const int64_t held = Submit(prompt2, q);
  ASSERT_TRUE(events_.WaitDone(held));
  const RequestLog log = events_.Get(held);
  EXPECT_EQ(log.text, Llama2()->Decode(partial));
  EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
  EXPECT_TRUE(log.last().text.size() >= 3) << "held text comes at the end";
}

// JSON mode: every sample goes out with the mask of tokens that keep the
// answer a JSON object, and once the object is whole only the end of
// generation is allowed, so a reply that would go on after it stops there.
TEST_F(StepDriverTextTest, JsonModeEndsTheAnswerWithTheObject) {
  const std::vector<int32_t> prompt = {1, 15043};
  const std::vector<int32_t> object = Ids("{\"city\": \"Paris\", \"n\": [2, 3.5]}");
  std::vector<int32_t> script = object;
  for (int32_t t : Ids(" That is all.")) script.push_back(t);
  script.push_back(Llama2()->eos_ids()[0]);
  worker_->worker().Script(prompt, script);
  GenerationParams p = Greedy(60);
  p.json_object = true;
  const int64_t id = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  ASSERT_TRUE(log.last().status.ok()) << log.last().status;
  std::vector<int32_t> want = object;
  want.push_back(Llama2()->eos_ids()[0]);
  EXPECT_EQ(log.tokens, want);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kStop);
  EXPECT_TRUE(nlohmann::json::accept(log.text)) << log.text;
  EXPECT_EQ(worker_->worker().masked_samples(), static_cast<int64_t>(want.size()));
  // Without JSON mode the same script runs to its end, unmasked.
  const int64_t plain = Submit(prompt, Greedy(60));
  ASSERT_TRUE(events_.WaitDone(plain));
  EXPECT_EQ(events_.Get(plain).tokens, script);
  EXPECT_EQ(worker_->worker().masked_samples(), static_cast<int64_t>(want.size()));
}

// A JSON Schema: the answer follows it. A script that writes a valid
// document ends with it; one that would break the schema is steered by the
// masks (the fake worker takes the first allowed token when its own is
// not), so what streams out is always a prefix of a valid document, and a
// whole one when the answer stops.
TEST_F(StepDriverTextTest, JsonSchemaHoldsTheAnswerToTheSchema) {
  auto schema = structured::CompiledSchema::Parse(R"({"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 10}, "rank": {"enum": [1, 2]}},
      "required": ["city", "rank"]})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  const std::vector<int32_t> prompt = {1, 15043};
  const std::vector<int32_t> valid = Ids("{\"city\": \"Paris\", \"rank\": 2}");
  std::vector<int32_t> script = valid;
  for (int32_t t : Ids(" Done.")) script.push_back(t);
  worker_->worker().Script(prompt, script);
  GenerationParams p = Greedy(60);
  p.json_schema = *schema;
  const int64_t id = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(id));
  RequestLog log = events_.Get(id);
  ASSERT_TRUE(log.last().status.ok()) << log.last().status;
  std::vector<int32_t> want = valid;
  want.push_back(Llama2()->eos_ids()[0]);
  EXPECT_EQ(log.tokens, want);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kStop);

  const std::vector<int32_t> other = {1, 15044};
  worker_->worker().Script(other, Ids("{\"town\": \"Lyon\", \"rank\": 3}"));
  const int64_t steered = Submit(other, p);
  ASSERT_TRUE(events_.WaitDone(steered));
  log = events_.Get(steered);
  ASSERT_TRUE(log.last().status.ok()) << log.last().status;
  structured::SchemaGrammar g(schema->get());
  EXPECT_TRUE(g.Feed(log.text)) << log.text;
  if (log.last().finish_reason == FinishReason::kStop) EXPECT_TRUE(g.IsComplete()) << log.text;
  EXPECT_NE(log.text.find("\"city\""), std::string::npos) << log.text;  // it was required
}

// A worker that samples outside the mask ends the request with an error
// rather than streaming an answer that is not JSON.
class StepDriverBrokenMaskTest : public testing::DriverFixture {};

TEST_F(StepDriverBrokenMaskTest, ATokenOutsideTheMaskFailsTheRequest) {
  StepDriverConfig c = BaseConfig();
  c.tokenizer = Llama2();
  c.vocab_size = Llama2()->vocab_size();
  c.eos_token_ids = Llama2()->eos_ids();
  StartCoordinator(c);
  testing::FakeWorker::Options o{Llama2()->vocab_size()};
  o.ignore_allowed_tokens = true;
  testing::FakeWorkerServer* w = AddWorker(o);
  const std::vector<int32_t> prompt = {1, 15043};
  w->worker().Script(prompt, Llama2()->Encode("Sure: {}", /*add_bos=*/false));
  GenerationParams p = Greedy(20);
  p.json_object = true;
  const int64_t id = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.last().status.code(), absl::StatusCode::kInternal) << log.last().status;
  EXPECT_TRUE(log.tokens.empty());
}

}  // namespace
}  // namespace tandem::coord
