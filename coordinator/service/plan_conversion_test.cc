#include "coordinator/service/plan_conversion.h"

#include <memory>

#include "absl/time/clock.h"
#include "coordinator/service/model_loading.h"
#include "coordinator/service/testing/fake_worker.h"
#include "gtest/gtest.h"

namespace tandem::coord {
namespace {

sched::StepPlan TwoChunks() {
  sched::StepPlan plan;
  plan.step_id = 4;
  sched::ScheduledChunk a;
  a.request_id = 1;
  a.tokens = {5, 6, 7};
  a.start_pos = 0;
  a.sample = true;
  a.block_table = {0};
  sched::ScheduledChunk b;
  b.request_id = 2;
  b.tokens = {8, 9};
  b.start_pos = 16;
  b.sample = false;  // a partial prefill
  b.pool = sched::KvPool::kCpu;
  b.block_table = {1, 2};
  plan.chunks = {a, b};
  return plan;
}

TEST(PlanConversion, StepSequenceCarriesEverything) {
  GenerationParams p;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.top_logprobs = 3;
  p.logit_bias = {{11, -100.0f}, {12, 2.5f}};
  const sched::StepPlan plan = TwoChunks();
  proto::StepSequence s = ToStepSequence(plan.chunks[0], p, 1234, 6);
  EXPECT_EQ(s.seq_id(), 1);
  EXPECT_EQ(std::vector<int32_t>(s.tokens().begin(), s.tokens().end()),
            (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(s.start_pos(), 0);
  EXPECT_TRUE(s.sample());
  EXPECT_FALSE(s.cpu_attention());
  EXPECT_EQ(s.generated(), 6);
  EXPECT_FLOAT_EQ(s.sampling().temperature(), 0.7f);
  EXPECT_FLOAT_EQ(s.sampling().top_p(), 0.9f);
  EXPECT_EQ(s.sampling().top_k(), 40);
  EXPECT_EQ(s.sampling().seed(), 1234u);
  EXPECT_EQ(s.sampling().top_logprobs(), 3);
  EXPECT_EQ(s.sampling().logit_bias().size(), 2u);
  EXPECT_FLOAT_EQ(s.sampling().logit_bias().at(12), 2.5f);

  GenerationParams defaults;  // top_k -1 (disabled) is 0 on the wire
  s = ToStepSequence(plan.chunks[1], defaults, 0, 0);
  EXPECT_TRUE(s.cpu_attention());
  EXPECT_FALSE(s.sample());
  EXPECT_EQ(s.start_pos(), 16);
  EXPECT_EQ(s.sampling().top_k(), 0);
  EXPECT_EQ(s.sampling().top_logprobs(), -1);
  EXPECT_EQ(s.block_table_size(), 2);
}

TEST(PlanConversion, MinTokensForbidsStopTokensUntilReached) {
  GenerationParams p;
  p.min_tokens = 2;
  p.stop_token_ids = {9};
  p.logit_bias = {{5, 1.0f}};
  const sched::StepPlan plan = TwoChunks();
  const std::vector<int32_t> eos = {2};
  proto::StepSequence s = ToStepSequence(plan.chunks[0], p, 1, 1, eos);
  EXPECT_EQ(s.sampling().logit_bias().size(), 3u);
  EXPECT_LT(s.sampling().logit_bias().at(2), -1e8f);
  EXPECT_LT(s.sampling().logit_bias().at(9), -1e8f);
  EXPECT_FLOAT_EQ(s.sampling().logit_bias().at(5), 1.0f);
  s = ToStepSequence(plan.chunks[0], p, 1, 2, eos);  // reached
  EXPECT_EQ(s.sampling().logit_bias().size(), 1u);
  p.ignore_eos = true;
  s = ToStepSequence(plan.chunks[0], p, 1, 0, eos);
  EXPECT_FALSE(s.sampling().logit_bias().contains(2));
  EXPECT_TRUE(s.sampling().logit_bias().contains(9));
}

TEST(PlanConversion, MatchResultsNeedsATokenPerSamplingChunk) {
  const sched::StepPlan plan = TwoChunks();
  proto::StepResult r;
  auto* a = r.add_results();
  a->set_seq_id(1);
  a->set_token(42);
  a->set_logprob(-0.1f);
  a->add_top_ids(42);
  a->add_top_logprobs(-0.1f);
  r.add_results()->set_seq_id(2);  // the partial prefill: ignored
  absl::flat_hash_map<int64_t, const proto::SequenceResult*> by_id;
  auto tokens = MatchResults(plan, r, &by_id);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 1u);
  EXPECT_EQ((*tokens)[0].request_id, 1);
  EXPECT_EQ((*tokens)[0].token, 42);
  const TokenLogprob lp = ToTokenLogprob(*by_id.at(1));
  EXPECT_EQ(lp.id, 42);
  EXPECT_EQ(lp.top.size(), 1u);

  proto::StepResult missing;
  EXPECT_EQ(MatchResults(plan, missing, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  proto::StepResult stranger = r;
  stranger.add_results()->set_seq_id(77);
  EXPECT_EQ(MatchResults(plan, stranger, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  proto::StepResult twice = r;
  *twice.add_results() = *a;
  EXPECT_EQ(MatchResults(plan, twice, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelLoading, RequestAndValidation) {
  ModelSpec spec;
  spec.model_path = "/models/m";
  spec.max_context = 64;
  spec.block_size = 16;
  spec.kv_blocks = 10;
  ASSERT_TRUE(spec.Validate().ok());
  // 10 blocks * 16 / 64 = 2 sequences of 4 blocks.
  EXPECT_EQ(spec.KvBlocksAfterRounding(), 8);
  proto::LoadModelRequest r = BuildLoadModelRequest(spec);
  EXPECT_EQ(r.model_path(), "/models/m");
  EXPECT_TRUE(r.placement().whole_model());
  EXPECT_EQ(r.max_context(), 64);
  EXPECT_EQ(r.kv_blocks(), 10);
  EXPECT_EQ(r.cpu_placement().experts_size(), 0);
  EXPECT_TRUE(r.data_segment().empty());

  spec.cpu_experts = {{0, 3}, {}, {1}};
  EXPECT_EQ(spec.Validate().code(), absl::StatusCode::kInvalidArgument);
  spec.data_segment = "/tandem-9-experts";
  spec.attach_timeout = absl::Seconds(5);
  ASSERT_TRUE(spec.Validate().ok());
  r = BuildLoadModelRequest(spec);
  ASSERT_EQ(r.cpu_placement().experts_size(), 3);
  EXPECT_EQ(r.cpu_placement().experts(0).experts_size(), 2);
  EXPECT_EQ(r.cpu_placement().experts(1).experts_size(), 0);
  EXPECT_EQ(r.data_segment(), "/tandem-9-experts");
  EXPECT_EQ(r.attach_timeout_ms(), 5000);

  spec.kv_blocks = 0;
  EXPECT_EQ(spec.Validate().code(), absl::StatusCode::kInvalidArgument);
}

ModelSpec FakeSpec() {
  ModelSpec spec;
  spec.model_path = "/models/fake";
  spec.max_context = 32;
  spec.block_size = 8;
  spec.kv_blocks = 8;
  return spec;
}

TEST(ModelLoading, LoadsOnAWorker) {
  auto w = testing::FakeWorkerServer::Start();
  ASSERT_NE(w, nullptr);
  auto stub = proto::Worker::NewStub(MakeWorkerChannel(w->address()));
  auto r = LoadModelOnWorker(*stub, FakeSpec(), absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kv_blocks(), FakeSpec().KvBlocksAfterRounding());
  EXPECT_EQ(w->worker().last_load().model_path(), "/models/fake");
  ModelSpec bad = FakeSpec();
  bad.model_path.clear();
  EXPECT_EQ(LoadModelOnWorker(*stub, bad, absl::Seconds(10)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelLoading, PendingLoadIsAsyncCancellableAndBounded) {
  auto w = testing::FakeWorkerServer::Start();
  ASSERT_NE(w, nullptr);
  w->worker().HoldLoads(true);  // like a gpu_worker waiting for its cpu_worker
  auto stub = proto::Worker::NewStub(MakeWorkerChannel(w->address()));
  auto load = PendingLoad::Start(*stub, BuildLoadModelRequest(FakeSpec()),
                                 absl::Seconds(30));
  EXPECT_FALSE(load->Wait(absl::Milliseconds(100)));
  EXPECT_FALSE(load->done());
  EXPECT_EQ(load->result().status().code(),
            absl::StatusCode::kFailedPrecondition);
  load->Cancel();
  ASSERT_TRUE(load->Wait(absl::Seconds(5)));
  EXPECT_EQ(load->result().status().code(), absl::StatusCode::kCancelled);

  // The deadline bounds it.
  auto bounded = PendingLoad::Start(*stub, BuildLoadModelRequest(FakeSpec()),
                                    absl::Milliseconds(200));
  ASSERT_TRUE(bounded->Wait(absl::Seconds(5)));
  EXPECT_EQ(bounded->result().status().code(),
            absl::StatusCode::kDeadlineExceeded);

  // Released: it completes.
  auto ok = PendingLoad::Start(*stub, BuildLoadModelRequest(FakeSpec()),
                               absl::Seconds(30));
  w->worker().HoldLoads(false);
  ASSERT_TRUE(ok->Wait(absl::Seconds(5)));
  EXPECT_TRUE(ok->result().ok()) << ok->result().status();
  // Nobody listening: UNAVAILABLE.
  const std::string address = w->address();
  w->Kill();
  auto gone_stub = proto::Worker::NewStub(MakeWorkerChannel(address));
  auto gone = PendingLoad::Start(*gone_stub, BuildLoadModelRequest(FakeSpec()),
                                 absl::Seconds(5));
  ASSERT_TRUE(gone->Wait(absl::Seconds(10)));
  EXPECT_EQ(gone->result().status().code(), absl::StatusCode::kUnavailable);
}

TEST(GenerationTypes, ValidateRequest) {
  GenerationRequest r;
  EXPECT_EQ(ValidateGenerationRequest(r, 0, false).code(),
            absl::StatusCode::kInvalidArgument);  // empty prompt
  r.prompt_ids = {1, 2, 3};
  EXPECT_TRUE(ValidateGenerationRequest(r, 10, false).ok());
  r.prompt_ids = {1, 20};
  EXPECT_EQ(ValidateGenerationRequest(r, 10, false).code(),
            absl::StatusCode::kInvalidArgument);
  r.prompt_ids = {1};
  r.params.top_logprobs = 21;
  EXPECT_EQ(ValidateGenerationRequest(r, 10, false).code(),
            absl::StatusCode::kInvalidArgument);
  r.params.top_logprobs = -1;
  r.params.stop = {"x"};
  EXPECT_EQ(ValidateGenerationRequest(r, 10, false).code(),
            absl::StatusCode::kInvalidArgument);  // no tokenizer
  EXPECT_TRUE(ValidateGenerationRequest(r, 10, true).ok());
  r.params.logit_bias[10] = 1.0f;
  EXPECT_EQ(ValidateGenerationRequest(r, 10, true).code(),
            absl::StatusCode::kInvalidArgument);
  r.params.logit_bias.clear();
  r.params.max_tokens = 0;
  EXPECT_EQ(ValidateGenerationRequest(r, 10, true).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::coord
