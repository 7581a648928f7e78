#include "coordinator/scheduler/request.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

using ::testing::ElementsAre;

TEST(SamplingParamsTest, Validate) {
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
  SamplingParams p;
  p.max_tokens = 0;
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  p = {};
  p.temperature = -0.5f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_p = 0.0f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_p = 1.5f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.stop = {"ok", ""};
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.stop_token_ids = {3, -1};
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.temperature = 0.0f;  // greedy
  p.top_k = 0;           // disabled
  p.seed = 7;
  EXPECT_TRUE(p.Validate().ok());
}

Request Make(std::vector<int32_t> prompt, SamplingParams p) {
  return Request(1, std::move(prompt),
                 std::make_shared<const SamplingParams>(std::move(p)), 0);
}

TEST(RequestTest, TokensSpanPromptAndOutput) {
  Request r = Make({10, 11, 12}, {});
  EXPECT_EQ(r.status(), RequestStatus::kWaiting);
  r.Admit(KvPool::kGpu, 0);
  r.AdvanceComputed(3);
  r.AppendOutputToken(20);
  EXPECT_EQ(r.num_tokens(), 4);
  EXPECT_EQ(r.num_uncomputed_tokens(), 1);
  EXPECT_EQ(r.token_at(3), 20);
  EXPECT_THAT(r.tokens(1, 3), ElementsAre(11, 12, 20));
  r.Preempt();  // recompute: generated tokens stay
  EXPECT_EQ(r.status(), RequestStatus::kPreempted);
  EXPECT_EQ(r.num_computed_tokens(), 0);
  EXPECT_EQ(r.kv_pool(), std::nullopt);
  EXPECT_THAT(r.output_token_ids(), ElementsAre(20));
  EXPECT_EQ(r.num_uncomputed_tokens(), 4);
  EXPECT_EQ(r.num_preemptions(), 1);
  r.Admit(KvPool::kCpu, 5);
  EXPECT_EQ(r.kv_pool(), KvPool::kCpu);
  r.MarkFinished(FinishReason::kAbort);
  EXPECT_TRUE(r.is_finished());
  EXPECT_EQ(r.finish_reason(), FinishReason::kAbort);
}

// Appends `token` to a running request and checks it.
std::optional<FinishReason> Emit(Request& r, int32_t token,
                                 std::vector<int32_t> eos,
                                 int64_t max_model_len) {
  r.AdvanceComputed(r.num_uncomputed_tokens());
  r.AppendOutputToken(token);
  return r.CheckStop(token, eos, max_model_len);
}

TEST(RequestTest, EosStopsUnlessIgnored) {
  Request r = Make({1, 2}, {});
  r.Admit(KvPool::kGpu, 0);
  EXPECT_EQ(Emit(r, 5, {2, 9}, 100), std::nullopt);
  EXPECT_EQ(Emit(r, 9, {2, 9}, 100), FinishReason::kStop);
  SamplingParams p;
  p.ignore_eos = true;
  Request q = Make({1, 2}, p);
  q.Admit(KvPool::kGpu, 0);
  EXPECT_EQ(Emit(q, 9, {2, 9}, 100), std::nullopt);
}

TEST(RequestTest, StopTokenIdsApplyEvenWithIgnoreEos) {
  SamplingParams p;
  p.ignore_eos = true;
  p.stop_token_ids = {42};
  Request r = Make({1}, p);
  r.Admit(KvPool::kGpu, 0);
  EXPECT_EQ(Emit(r, 41, {0}, 100), std::nullopt);
  EXPECT_EQ(Emit(r, 42, {0}, 100), FinishReason::kStop);
}

TEST(RequestTest, MaxTokensAndContextLimitGiveLength) {
  SamplingParams p;
  p.max_tokens = 2;
  Request r = Make({1, 2, 3}, p);
  r.Admit(KvPool::kGpu, 0);
  EXPECT_EQ(Emit(r, 5, {}, 100), std::nullopt);
  EXPECT_EQ(Emit(r, 5, {}, 100), FinishReason::kLength);

  Request q = Make({1, 2, 3}, {});
  q.Admit(KvPool::kGpu, 0);
  EXPECT_EQ(Emit(q, 5, {}, 5), std::nullopt);           // 4 tokens
  EXPECT_EQ(Emit(q, 5, {}, 5), FinishReason::kLength);  // 5 = the limit
}

TEST(RequestTest, NaturalStopWinsOverLength) {
  SamplingParams p;
  p.max_tokens = 1;
  Request r = Make({1}, p);
  r.Admit(KvPool::kGpu, 0);
  EXPECT_EQ(Emit(r, 0, {0}, 2), FinishReason::kStop);
}

TEST(RequestTest, Names) {
  EXPECT_STREQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kAbort), "abort");
  EXPECT_STREQ(FinishReasonName(FinishReason::kError), "error");
  EXPECT_STREQ(KvPoolName(KvPool::kCpu), "cpu");
  EXPECT_STREQ(RequestStatusName(RequestStatus::kPreempted), "preempted");
}

}  // namespace
}  // namespace tandem::sched
