// The load generator against the frontend on the fake backend, in process:
// the prompts reach the backend with their drawn lengths, every answer is
// timed and counted, and an unreachable server is a clear error.
#include "coordinator/loadgen/serve_benchmark.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "coordinator/frontend/testing/server_test_util.h"
#include "coordinator/loadgen/datasets.h"
#include "gtest/gtest.h"

namespace tandem::loadgen {
namespace {

using frontend::testing::FakeBackend;
using frontend::testing::TestServer;

ServeBenchmarkOptions Options(const TestServer& ts) {
  ServeBenchmarkOptions o;
  o.server.base_url = absl::StrCat("http://127.0.0.1:", ts.server->port());
  o.server.timeout_s = 30;
  o.num_prompts = 12;
  o.input_len = 20;
  o.output_len = 6;
  o.range_ratio = 0.5;
  o.request_rate = 200;
  o.max_concurrency = 4;
  o.seed = 3;
  return o;
}

TEST(ServeBenchmark, CompletionsReachTheServerWithTheirLengths) {
  TestServer ts;
  FakeBackend::Options bo;
  bo.step = std::chrono::milliseconds(3);
  ASSERT_TRUE(ts.Start({}, bo));
  const ServeBenchmarkOptions o = Options(ts);
  auto dataset = MakeRandomDataset(o);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  auto r = RunServeBenchmark(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const nlohmann::ordered_json& s = *r;
  EXPECT_EQ(s["model"], "fake");
  EXPECT_EQ(s["completed"], 12) << s.dump();
  EXPECT_EQ(s["failed"], 0) << s.dump();

  // The backend got each prompt of the dataset, ids and lengths as drawn.
  int64_t input = 0, output = 0;
  std::multiset<std::vector<int32_t>> sent, drawn;
  for (const auto& req : ts.backend->submitted()) sent.insert(req.prompt_ids);
  for (const DatasetPrompt& p : *dataset) {
    EXPECT_GE(p.input_len, 10);
    EXPECT_LE(p.input_len, 30);
    EXPECT_GE(p.output_len, 3);
    EXPECT_LE(p.output_len, 9);
    input += p.input_len;
    output += p.output_len;
    drawn.insert(p.prompt.get<std::vector<int32_t>>());
  }
  EXPECT_EQ(sent, drawn);
  EXPECT_EQ(s["total_input_tokens"], input);
  EXPECT_EQ(s["total_output_tokens"], output);  // ignore_eos: every answer runs to its length
  // A token every 3 ms at least: each gap and first token takes time.
  EXPECT_GT(s["mean_ttft_ms"].get<double>(), 0);
  EXPECT_GE(s["median_itl_ms"].get<double>(), 2.0);
  EXPECT_GE(s["mean_tpot_ms"].get<double>(), 2.0);
  EXPECT_GE(s["p99_e2el_ms"].get<double>(), s["mean_e2el_ms"].get<double>());
  EXPECT_GT(s["output_throughput"].get<double>(), 0);
}

TEST(ServeBenchmark, ARandomPrefixOpensEveryPromptAndCountsAsInput) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  ServeBenchmarkOptions o = Options(ts);
  auto plain = MakeRandomDataset(o);
  o.prefix_len = 7;
  auto prefixed = MakeRandomDataset(o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(prefixed.ok()) << prefixed.status();
  ASSERT_EQ(prefixed->size(), plain->size());
  std::vector<int32_t> opening;
  for (size_t i = 0; i < prefixed->size(); ++i) {
    const std::vector<int32_t> ids = (*prefixed)[i].prompt.get<std::vector<int32_t>>();
    ASSERT_EQ(static_cast<int64_t>(ids.size()), (*prefixed)[i].input_len);
    EXPECT_GE((*prefixed)[i].input_len, 7 + 10);
    EXPECT_LE((*prefixed)[i].input_len, 7 + 30);
    if (i == 0) opening.assign(ids.begin(), ids.begin() + 7);
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 7), opening) << i;
  }
  // Without a prefix the draws are what they were.
  o.prefix_len = 0;
  auto again = MakeRandomDataset(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[3].prompt, (*plain)[3].prompt);
  o.prefix_len = -1;
  EXPECT_EQ(MakeRandomDataset(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServeBenchmark, ChatSendsTheDetokenizedPrompt) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  ServeBenchmarkOptions o = Options(ts);
  o.endpoint = ApiEndpoint::kChat;
  o.num_prompts = 4;
  auto r = RunServeBenchmark(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["completed"], 4) << r->dump();
  EXPECT_EQ((*r)["endpoint"], "/v1/chat/completions");
  // The chat template adds its own tokens: the server's count is used.
  auto dataset = MakeRandomDataset(o);
  ASSERT_TRUE(dataset.ok());
  int64_t drawn = 0;
  for (const DatasetPrompt& p : *dataset) drawn += p.input_len;
  EXPECT_GT((*r)["total_input_tokens"].get<int64_t>(), drawn);
}

TEST(ServeBenchmark, FailedRequestsAreCountedWithTheirReason) {
  TestServer ts;
  FakeBackend::Options bo;
  bo.fail_after_tokens = 2;  // every request fails mid-stream
  ASSERT_TRUE(ts.Start({}, bo));
  ServeBenchmarkOptions o = Options(ts);
  o.num_prompts = 3;
  auto r = RunServeBenchmark(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["completed"], 0) << r->dump();
  EXPECT_EQ((*r)["failed"], 3);
  ASSERT_FALSE((*r)["errors"].empty());
}

// A ShareGPT file: the first turn is the prompt (text), the second's token
// count the output length; pairs too short or too long are skipped.
TEST(ServeBenchmark, ShareGptConversationsAsVllmSamplesThem) {
  TestServer ts;
  ASSERT_TRUE(ts.Start());
  const std::string path = ::testing::TempDir() + "/sharegpt.json";
  std::ofstream(path) << R"([
    {"conversations": [{"from": "human", "value": "Tell me a story."},
                       {"from": "gpt", "value": "Once upon a time."}]},
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello there"}]},
    {"conversations": [{"from": "human", "value": "Only one turn"}]},
    {"id": "no conversations"},
    {"conversations": [{"from": "human", "value": "What is two and two?"},
                       {"from": "gpt", "value": "Four."}, {"from": "human", "value": "More"}]}
  ])";
  ServeBenchmarkOptions o = Options(ts);
  o.dataset_name = "sharegpt";
  o.dataset_path = path;
  o.num_prompts = 2;
  auto dataset = MakeDataset(o);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(dataset->size(), 2u);
  std::multiset<std::string> prompts;
  for (const DatasetPrompt& p : *dataset) {
    prompts.insert(p.prompt.get<std::string>());
    EXPECT_EQ(p.input_len, static_cast<int64_t>(p.prompt.get<std::string>().size()));  // bytes
  }
  // "Hi" is under 4 tokens: skipped.
  EXPECT_EQ(prompts, (std::multiset<std::string>{"Tell me a story.", "What is two and two?"}));
  for (const DatasetPrompt& p : *dataset) {
    EXPECT_EQ(p.output_len, p.prompt == "Tell me a story." ? 17 : 5);
  }
  auto r = RunServeBenchmark(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["completed"], 2) << r->dump();
  // Asking for more than the file holds, or no file, is an error.
  o.num_prompts = 3;
  EXPECT_EQ(MakeDataset(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.dataset_path = path + ".missing";
  EXPECT_EQ(MakeDataset(o).status().code(), absl::StatusCode::kNotFound);
  o.dataset_name = "sonnet";
  EXPECT_EQ(MakeDataset(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServeBenchmark, AnUnreachableServerIsUnavailable) {
  ServeBenchmarkOptions o;
  o.server.base_url = "http://127.0.0.1:1";
  o.num_prompts = 1;
  auto r = RunServeBenchmark(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  o.model = "m";
  o.request_rate = 0;
  EXPECT_EQ(RunServeBenchmark(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::loadgen
