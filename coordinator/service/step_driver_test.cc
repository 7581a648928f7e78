// The step driver against an in-process fake gpu_worker over loopback gRPC:
// streaming, finish reasons, abort, preemption, concurrency, overload, the
// sampling options on the wire, metrics.
#include "coordinator/service/step_driver.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "coordinator/service/testing/driver_fixture.h"
#include "gtest/gtest.h"

namespace tandem::coord {
namespace {

using testing::RequestLog;

class StepDriverTest : public testing::DriverFixture {};

TEST_F(StepDriverTest, StreamsOneEventPerTokenInOrder) {
  StartCoordinator();
  testing::FakeWorkerServer* w = AddWorker();
  const std::vector<int32_t> prompt = Prompt(5);
  const int64_t id = Submit(prompt, Greedy(8));
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.tokens, Expected(prompt, 8));
  ASSERT_EQ(log.events.size(), 8u);
  for (size_t i = 0; i < log.events.size(); ++i) {
    EXPECT_EQ(log.events[i].request_id, id);
    EXPECT_EQ(log.events[i].token_ids.size(), 1u);
    EXPECT_EQ(log.events[i].finished, i == 7);
    EXPECT_EQ(log.events[i].text, "");  // no tokenizer
  }
  EXPECT_GE(log.events[0].queue_time_s, 0.0);
  EXPECT_LT(log.events[1].queue_time_s, 0.0);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
  EXPECT_TRUE(log.last().status.ok());
  EXPECT_EQ(log.last().usage.prompt_tokens, 5);
  EXPECT_EQ(log.last().usage.completion_tokens, 8);
  EXPECT_EQ(log.finals, 1);
  EXPECT_EQ(log.after_final, 0);
  EXPECT_EQ(log.concurrent, 0);
  // The model was loaded as configured.
  const proto::LoadModelRequest load = w->worker().last_load();
  EXPECT_EQ(load.model_path(), "/models/fake");
  EXPECT_EQ(load.max_context(), 64);
  EXPECT_EQ(load.block_size(), 4);
  EXPECT_EQ(load.kv_blocks(), 64);
  EXPECT_TRUE(load.placement().whole_model());
}

TEST_F(StepDriverTest, JsonModeNeedsATokenizer) {
  StartCoordinator();  // no tokenizer
  AddWorker();
  GenerationRequest r;
  r.prompt_ids = Prompt(3);
  r.params = Greedy(4);
  r.params.json_object = true;
  const auto id = driver_->Submit(std::move(r), events_.Callback());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("tokenizer"), std::string::npos) << id.status();
}

TEST_F(StepDriverTest, EosStopTokenIdsAndIgnoreEos) {
  StartCoordinator();
  testing::FakeWorkerServer* w = AddWorker();
  const std::vector<int32_t> prompt = Prompt(6, 300);
  w->worker().Script(prompt, {20, 21, kEos, 30, 31});

  const int64_t eos = Submit(prompt, Greedy(10));
  ASSERT_TRUE(events_.WaitDone(eos));
  RequestLog log = events_.Get(eos);
  EXPECT_EQ(log.tokens, (std::vector<int32_t>{20, 21, kEos}));
  EXPECT_EQ(log.last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(log.last().stop_token_id, kEos);

  GenerationParams p = Greedy(10);
  p.stop_token_ids = {21};
  const int64_t stop_id = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(stop_id));
  log = events_.Get(stop_id);
  EXPECT_EQ(log.tokens, (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(log.last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(log.last().stop_token_id, 21);

  p = Greedy(7);
  p.ignore_eos = true;
  const int64_t ignore = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(ignore));
  log = events_.Get(ignore);
  ASSERT_EQ(log.tokens.size(), 7u);
  EXPECT_EQ(log.tokens[2], kEos);
  EXPECT_EQ(log.tokens[4], 31);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
}

TEST_F(StepDriverTest, ContextLimitEndsWithLength) {
  StartCoordinator();
  AddWorker();
  const std::vector<int32_t> prompt = Prompt(60);
  GenerationParams p;
  p.temperature = 0;  // no max_tokens: until the context is full
  const int64_t id = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.tokens, Expected(prompt, 4));
  EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
}

TEST_F(StepDriverTest, SubmitRejectsBadRequests) {
  StartCoordinator();
  GenerationRequest r;
  EXPECT_EQ(driver_->Submit(r, events_.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);  // empty prompt
  r.prompt_ids = Prompt(64);
  EXPECT_EQ(driver_->Submit(r, events_.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);  // no room to generate
  r.prompt_ids = {1, 2, static_cast<int32_t>(kVocab)};
  EXPECT_EQ(driver_->Submit(r, events_.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);  // outside the vocabulary
  r.prompt_ids = {1, 2};
  r.params.stop = {"x"};
  EXPECT_EQ(driver_->Submit(r, events_.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);  // no tokenizer
  r.params.stop.clear();
  EXPECT_EQ(driver_->Submit(r, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(driver_->Abort(12345).code(), absl::StatusCode::kNotFound);
}

TEST_F(StepDriverTest, QueuesUntilAWorkerRegisters) {
  StartCoordinator();
  const int64_t id = Submit(Prompt(5), Greedy(3));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(driver_->ready());
  EXPECT_EQ(driver_->metrics().num_waiting, 1);
  EXPECT_TRUE(events_.Get(id).events.empty());
  AddWorker();
  ASSERT_TRUE(events_.WaitDone(id));
  EXPECT_EQ(events_.Get(id).tokens, Expected(Prompt(5), 3));
  EXPECT_TRUE(driver_->ready());
}

TEST_F(StepDriverTest, OverloadIsResourceExhausted) {
  StepDriverConfig c = BaseConfig();
  c.max_waiting = 3;
  StartCoordinator(c);  // no worker: everything waits
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit(Prompt(4), Greedy(2)));
  GenerationRequest r;
  r.prompt_ids = Prompt(4);
  const auto refused = driver_->Submit(r, events_.Callback());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(driver_->Abort(ids[0]).ok());
  ASSERT_TRUE(events_.WaitDone(ids[0]));
  EXPECT_EQ(events_.Get(ids[0]).last().finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(driver_->Submit(r, events_.Callback()).ok());
}

TEST_F(StepDriverTest, AbortFreesTheKvAtOnce) {
  StartCoordinator();
  testing::FakeWorkerServer* w = AddWorker();
  w->worker().SetStepDelay(absl::Milliseconds(10));
  const int64_t id = Submit(Prompt(5), Greedy(50));
  ASSERT_TRUE(events_.WaitEvents(id, 3));
  EXPECT_GT(driver_->metrics().gpu_kv_blocks_used, 0);
  ASSERT_TRUE(driver_->Abort(id).ok());
  EXPECT_EQ(driver_->metrics().gpu_kv_blocks_used, 0);  // at once
  EXPECT_EQ(driver_->Abort(id).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.last().finish_reason, FinishReason::kAbort);
  EXPECT_LT(log.tokens.size(), 50u);
  EXPECT_EQ(log.after_final, 0);
  // The next plan tells the worker.
  const int64_t next = Submit(Prompt(3), Greedy(2));
  ASSERT_TRUE(events_.WaitDone(next));
  const std::vector<int64_t> freed = w->worker().freed();
  EXPECT_NE(std::find(freed.begin(), freed.end(), id), freed.end());
}

TEST_F(StepDriverTest, ConsumerGoneStopsTheRequest) {
  StartCoordinator();
  testing::FakeWorkerServer* w = AddWorker();
  w->worker().SetStepDelay(absl::Milliseconds(5));
  const int64_t id =
      Submit(Prompt(5), Greedy(40), events_.Callback(/*disconnect_after=*/2));
  ASSERT_TRUE(events_.WaitEvents(id, 2));
  const int64_t next = Submit(Prompt(3), Greedy(3));
  ASSERT_TRUE(events_.WaitDone(next));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.events.size(), 2u);  // nothing after it said stop
  EXPECT_EQ(log.finals, 0);
  const std::vector<int64_t> freed = w->worker().freed();
  EXPECT_NE(std::find(freed.begin(), freed.end(), id), freed.end());
  EXPECT_EQ(driver_->metrics().num_running, 0);
}

TEST_F(StepDriverTest, PreemptionWithATinyKvPool) {
  StepDriverConfig c = BaseConfig();
  c.model.kv_blocks = 16;  // one sequence of 64 tokens: 16 blocks of 4
  StartCoordinator(c);
  AddWorker();
  // Six requests of 10 + 20 tokens (8 blocks each at the end): they cannot
  // all hold KV at once, so the scheduler preempts and recomputes.
  std::vector<int64_t> ids;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(Prompt(10, 100 + 37 * i));
    GenerationParams p = Greedy(20);
    if (i % 2 == 1) {  // seeded sampling survives recompute too
      p.temperature = 0.8f;
      p.seed = 1000 + i;
    }
    ids.push_back(Submit(prompts.back(), p));
  }
  ASSERT_TRUE(events_.WaitAllDone(ids));
  for (int i = 0; i < 6; ++i) {
    const RequestLog log = events_.Get(ids[i]);
    const float temp = i % 2 == 1 ? 0.8f : 0.0f;
    EXPECT_EQ(log.tokens, Expected(prompts[i], 20, temp, 1000 + i)) << i;
    EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
    EXPECT_EQ(log.finals, 1);
  }
  const DriverMetrics m = driver_->metrics();
  EXPECT_GT(m.num_preemptions, 0);
  EXPECT_EQ(m.gpu_kv_blocks_total, 16);
  EXPECT_EQ(m.gpu_kv_blocks_used, 0);
  EXPECT_EQ(m.num_step_failures, 0);
}

TEST_F(StepDriverTest, ConcurrentRequestsEachGetTheirOwnTokens) {
  StartCoordinator();
  AddWorker();
  std::vector<int64_t> ids;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> lengths;
  for (int i = 0; i < 16; ++i) {
    prompts.push_back(Prompt(1 + (i * 7) % 30, 200 + i));
    lengths.push_back(1 + (i * 5) % 17);
    ids.push_back(Submit(prompts.back(), Greedy(lengths.back())));
  }
  ASSERT_TRUE(events_.WaitAllDone(ids));
  absl::flat_hash_set<int64_t> unique(ids.begin(), ids.end());
  EXPECT_EQ(unique.size(), ids.size());
  for (int i = 0; i < 16; ++i) {
    const RequestLog log = events_.Get(ids[i]);
    EXPECT_EQ(log.tokens, Expected(prompts[i], lengths[i])) << i;
    EXPECT_EQ(log.finals, 1);
    EXPECT_EQ(log.after_final, 0);
    EXPECT_EQ(log.concurrent, 0);
  }
}

TEST_F(StepDriverTest, SamplingOptionsReachTheWorker) {
  StartCoordinator();
  testing::FakeWorkerServer* w = AddWorker();
  GenerationParams p;
  p.max_tokens = 3;
  p.temperature = 0.5f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.seed = 99;
  p.top_logprobs = 2;
  p.logit_bias = {{17, -5.0f}};
  const std::vector<int32_t> prompt = Prompt(6);
  const int64_t id = Submit(prompt, p);
  ASSERT_TRUE(events_.WaitDone(id));
  const RequestLog log = events_.Get(id);
  EXPECT_EQ(log.tokens, Expected(prompt, 3, 0.5f, 99));
  ASSERT_EQ(log.events.size(), 3u);
  for (const auto& e : log.events) {
    ASSERT_EQ(e.logprobs.size(), 1u);
    EXPECT_EQ(e.logprobs[0].id, e.token_ids[0]);
    EXPECT_FLOAT_EQ(e.logprobs[0].logprob, -0.5f);
    EXPECT_EQ(e.logprobs[0].top.size(), 2u);
  }
  // The plans: a prefill of the prompt, then decodes with generated = 1, 2.
  std::vector<proto::StepSequence> seqs;
  for (const proto::StepPlan& plan : w->worker().plans()) {
    for (const auto& s : plan.sequences()) {
      if (s.seq_id() == id) seqs.push_back(s);
    }
  }
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ(seqs[0].tokens_size(), 6);
  EXPECT_EQ(seqs[0].start_pos(), 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(seqs[i].sample());
    EXPECT_EQ(seqs[i].generated(), i);
    EXPECT_FLOAT_EQ(seqs[i].sampling().temperature(), 0.5f);
    EXPECT_FLOAT_EQ(seqs[i].sampling().top_p(), 0.9f);
    EXPECT_EQ(seqs[i].sampling().top_k(), 40);
    EXPECT_EQ(seqs[i].sampling().seed(), 99u);
    EXPECT_EQ(seqs[i].sampling().top_logprobs(), 2);
    EXPECT_FLOAT_EQ(seqs[i].sampling().logit_bias().at(17), -5.0f);
  }
  EXPECT_EQ(seqs[1].start_pos(), 6);
  EXPECT_EQ(seqs[2].start_pos(), 7);
  EXPECT_EQ(seqs[1].tokens(0), log.tokens[0]);
}

TEST_F(StepDriverTest, MetricsAndStepCallbackAndNoIdleSteps) {
  std::atomic<int64_t> callbacks{0};
  StepDriverConfig c = BaseConfig();
  c.on_step = [&](const StepStats& s) {
    EXPECT_TRUE(s.ok);
    EXPECT_GT(s.num_tokens, 0);
    ++callbacks;
  };
  StartCoordinator(c);
  testing::FakeWorkerServer* w = AddWorker();
  const int64_t a = Submit(Prompt(9), Greedy(4));
  const int64_t b = Submit(Prompt(3, 500), Greedy(6));
  ASSERT_TRUE(events_.WaitAllDone({a, b}));
  const DriverMetrics m = driver_->metrics();
  EXPECT_TRUE(m.ready);
  EXPECT_EQ(m.num_waiting, 0);
  EXPECT_EQ(m.num_running, 0);
  EXPECT_EQ(m.gpu_kv_blocks_total, 64);
  EXPECT_EQ(m.num_model_loads, 1);
  EXPECT_EQ(m.generated_tokens, 10);
  EXPECT_EQ(m.prompt_tokens, 12);
  EXPECT_EQ(m.num_requests_finished, 2);
  EXPECT_EQ(m.step_seconds.count(), m.num_steps);
  EXPECT_EQ(m.num_steps, w->worker().steps());
  EXPECT_EQ(m.step_seconds.cumulative_counts().back(), m.num_steps);
  EXPECT_FALSE(m.worker_address.empty());
  // Idle: the loop sleeps; no more Steps reach the worker.
  const int64_t calls = w->worker().step_calls();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(w->worker().step_calls(), calls);
  EXPECT_EQ(callbacks.load(), m.num_steps);
}

TEST_F(StepDriverTest, CallbackMaySubmitAndAbort) {
  StartCoordinator();
  AddWorker();
  std::atomic<int64_t> follow_up{-1};
  testing::EventCollector& events = events_;
  EventCallback cb = [&, inner = events_.Callback()](const GenerationEvent& e) {
    inner(e);
    if (e.finished && follow_up.load() < 0) {
      GenerationRequest r;
      r.prompt_ids = Prompt(4);
      r.params = Greedy(2);
      auto id = driver_->Submit(std::move(r), events.Callback());
      EXPECT_TRUE(id.ok());
      follow_up = id.ok() ? *id : -2;
      (void)driver_->Abort(e.request_id);  // already finished: NotFound
    }
    return true;
  };
  const int64_t first = Submit(Prompt(5), Greedy(2), cb);
  ASSERT_TRUE(events_.WaitDone(first));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (follow_up.load() < 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(follow_up.load(), 0);
  ASSERT_TRUE(events_.WaitDone(follow_up.load()));
  EXPECT_EQ(events_.Get(follow_up.load()).tokens, Expected(Prompt(4), 2));
}

// ScheInfer's n_g, re-solved per step: a step holding a prefill carries
// the answer for its token count, a decode-only step carries none (the
// worker keeps its value, which decode does not use).
TEST_F(StepDriverTest, PrefillStepsCarryTheirTokenAssignment) {
  StepDriverConfig config = BaseConfig();
  std::vector<int64_t> asked;
  config.prefill_gpu_tokens = [&asked](int64_t tokens) -> absl::StatusOr<int64_t> {
    asked.push_back(tokens);
    return tokens / 2;
  };
  StartCoordinator(config);
  testing::FakeWorkerServer* w = AddWorker();
  const int64_t id = Submit(Prompt(6), Greedy(3));
  ASSERT_TRUE(events_.WaitDone(id));
  const std::vector<proto::StepPlan> plans = w->worker().plans();
  ASSERT_EQ(plans.size(), 3u);
  ASSERT_TRUE(plans[0].has_prefill_gpu_tokens());
  EXPECT_EQ(plans[0].prefill_gpu_tokens(), 3);
  EXPECT_FALSE(plans[1].has_prefill_gpu_tokens());
  EXPECT_FALSE(plans[2].has_prefill_gpu_tokens());
  EXPECT_EQ(asked, std::vector<int64_t>{6});
}

// A failing solve is logged and the step runs without one.
TEST_F(StepDriverTest, AFailedTokenAssignmentLeavesTheStepAlone) {
  StepDriverConfig config = BaseConfig();
  config.prefill_gpu_tokens = [](int64_t) -> absl::StatusOr<int64_t> {
    return absl::InternalError("no solve");
  };
  StartCoordinator(config);
  testing::FakeWorkerServer* w = AddWorker();
  const std::vector<int32_t> prompt = Prompt(5);
  const int64_t id = Submit(prompt, Greedy(2));
  ASSERT_TRUE(events_.WaitDone(id));
  EXPECT_EQ(events_.Get(id).tokens, Expected(prompt, 2));
  for (const proto::StepPlan& plan : w->worker().plans()) {
    EXPECT_FALSE(plan.has_prefill_gpu_tokens());
  }
}

// Neo's sub-batches: a step holding CPU-pool sequences goes out in the
// order the rule gives, with the sub-batch sizes; a failing rule leaves the
// step one batch; the tokens are the same either way.
class SubBatchTest : public StepDriverTest {
 protected:
  void Run(bool fail) {
    StepDriverConfig config = BaseConfig();
    config.model.cpu_kv_tokens = 64 * 4;
    config.model.data_segment = "/tandem-step-driver-test";
    config.num_cpu_kv_blocks = 64;
    config.cpu_kv_only = true;
    config.sub_batches = [fail](absl::Span<const planner::StepSequenceShape> step)
        -> absl::StatusOr<planner::StepSubBatches> {
      if (fail) return absl::InternalError("no rule");
      planner::StepSubBatches s;
      for (size_t i = step.size(); i-- > 0;) s.order.push_back(i);  // reversed
      if (step.size() >= 2) s.sizes = {1, static_cast<int64_t>(step.size()) - 1};
      return s;
    };
    StartCoordinator(config);
    testing::FakeWorkerServer* w = AddWorker();
    std::vector<std::vector<int32_t>> prompts = {Prompt(3), Prompt(5, 300), Prompt(4, 500)};
    std::vector<int64_t> ids;
    for (const auto& p : prompts) ids.push_back(Submit(p, Greedy(4)));
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(events_.WaitDone(ids[i]));
      EXPECT_EQ(events_.Get(ids[i]).tokens, Expected(prompts[i], 4));
    }
    int split = 0;
    for (const proto::StepPlan& plan : w->worker().plans()) {
      for (const proto::StepSequence& q : plan.sequences()) EXPECT_TRUE(q.cpu_attention());
      if (fail || plan.sequences_size() < 2) {
        EXPECT_EQ(plan.micro_batch_sizes_size(), 0);
        continue;
      }
      ASSERT_EQ(plan.micro_batch_sizes_size(), 2);
      EXPECT_EQ(plan.micro_batch_sizes(0), 1);
      EXPECT_EQ(plan.micro_batch_sizes(1), plan.sequences_size() - 1);
      ++split;
    }
    if (!fail) EXPECT_GT(split, 0);
  }
};

TEST_F(SubBatchTest, CpuPoolStepsCarryTheirSubBatches) { Run(false); }
TEST_F(SubBatchTest, AFailingRuleLeavesTheStepOneBatch) { Run(true); }

}  // namespace
}  // namespace tandem::coord
