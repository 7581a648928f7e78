// The worker's step executor against the engine it wraps: plans with mixed
// prefill/decode sequences give the tokens `Generate` gives, prompt
// log-probs are those of the logits, bad plans are rejected cleanly.
#include "gpu_worker/service/step_executor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/checkpoint.h"
#include "gpu_worker/engine/generator.h"
#include "gpu_worker/engine/local_attention_offload.h"
#include "gpu_worker/engine/testing/separate_memory_device.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

std::unique_ptr<Engine> LoadEngine(const std::string& name, bool separate_memory = false) {
  auto ckpt = Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + name);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  EngineOptions o;
  if (separate_memory) {
    o.device = [] { return std::unique_ptr<Device>(new testing::SeparateMemoryDevice()); };
  }
  o.max_context = 128;
  o.max_sequences = 4;
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

proto::StepSequence Seq(int64_t id, std::vector<int32_t> tokens, int64_t start, bool sample,
                        int64_t generated = 0) {
  proto::StepSequence s;
  s.set_seq_id(id);
  for (int32_t t : tokens) s.add_tokens(t);
  s.set_start_pos(start);
  s.set_sample(sample);
  s.set_generated(generated);
  s.mutable_sampling()->set_top_p(1.0f);
  return s;
}

// On a device with its own memory, greedy requests are picked on the
// device (no logits cross to the host): the same tokens and log-probs as
// the host device's, prompt chunks that sample nothing included; a request
// that wants top log-probs still gets them from the logits.
TEST(StepExecutor, GreedyPicksOnADeviceWithItsOwnMemoryMatchTheHost) {
  StepExecutor host(LoadEngine("llama_f32"));
  StepExecutor own(LoadEngine("llama_f32", /*separate_memory=*/true));
  auto run = [](StepExecutor& ex, const proto::StepPlan& p) {
    auto r = ex.Run(p);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : proto::StepResult();
  };
  proto::StepPlan p0;
  *p0.add_sequences() = Seq(1, {5, 9, 13}, 0, false);
  *p0.add_sequences() = Seq(2, {100, 3, 4, 8}, 0, true);
  run(host, p0);
  run(own, p0);
  proto::StepPlan p1;
  *p1.add_sequences() = Seq(1, {2, 7}, 3, true);
  *p1.add_sequences() = Seq(2, {11}, 4, true, 1);
  p1.mutable_sequences(1)->mutable_sampling()->set_top_logprobs(3);
  for (int step = 0; step < 3; ++step) {
    const proto::StepResult want = run(host, p1);
    const proto::StepResult got = run(own, p1);
    ASSERT_EQ(got.results_size(), 2);
    ASSERT_EQ(want.results_size(), 2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(got.results(i).token(), want.results(i).token()) << step << " " << i;
      EXPECT_FLOAT_EQ(got.results(i).logprob(), want.results(i).logprob()) << step << " " << i;
    }
    EXPECT_EQ(got.results(1).top_ids_size(), step < 2 ? 3 : 0);
    EXPECT_EQ(got.results(0).top_ids_size(), 0);
    // Next step: each sequence's own pick, one token each.
    for (int i = 0; i < 2; ++i) {
      proto::StepSequence* s = p1.mutable_sequences(i);
      const int64_t start = s->start_pos() + s->tokens_size();
      s->clear_tokens();
      s->add_tokens(want.results(i).token());
      s->set_start_pos(start);
      s->set_generated(s->generated() + 1);
    }
    // Alone, the greedy sequence's steps are picked on the device.
    if (step == 1) p1.mutable_sequences(1)->mutable_sampling()->set_top_logprobs(0);
  }
}

// Two requests decoded together through plans equal each one generated alone.
TEST(StepExecutor, InterleavedPlansEqualGenerateAlone) {
  const std::vector<int32_t> a = {5, 9, 13, 2, 7, 1, 88}, b = {100, 3, 4};
  const int kTokens = 8;
  std::vector<int32_t> want_a, want_b;
  {
    auto engine = LoadEngine("qwen2_moe_f32");
    GenerationParams p;
    p.max_tokens = kTokens;
    p.ignore_eos = true;
    auto ra = Generate(*engine, 1, a, p);
    auto rb = Generate(*engine, 1, b, p);
    ASSERT_TRUE(ra.ok() && rb.ok());
    for (const auto& t : ra->tokens) want_a.push_back(t.id);
    for (const auto& t : rb->tokens) want_b.push_back(t.id);
  }
  StepExecutor ex(LoadEngine("qwen2_moe_f32"));
  std::vector<int32_t> got_a, got_b;
  // Step 0: a's prompt in two chunks (first without sampling), b waits.
  proto::StepPlan p0;
  *p0.add_sequences() = Seq(1, {a.begin(), a.begin() + 4}, 0, false);
  ASSERT_TRUE(ex.Run(p0).ok());
  // Step 1: rest of a (sampled) with all of b (sampled).
  proto::StepPlan p1;
  *p1.add_sequences() = Seq(1, {a.begin() + 4, a.end()}, 4, true);
  *p1.add_sequences() = Seq(2, b, 0, true);
  auto r1 = ex.Run(p1);
  ASSERT_TRUE(r1.ok()) << r1.status();
  got_a.push_back(r1->results(0).token());
  got_b.push_back(r1->results(1).token());
  for (int i = 1; i < kTokens; ++i) {
    proto::StepPlan p;
    *p.add_sequences() = Seq(2, {got_b.back()}, static_cast<int64_t>(b.size()) + i - 1, true, i);
    *p.add_sequences() = Seq(1, {got_a.back()}, static_cast<int64_t>(a.size()) + i - 1, true, i);
    auto r = ex.Run(p);
    ASSERT_TRUE(r.ok()) << r.status();
    got_b.push_back(r->results(0).token());
    got_a.push_back(r->results(1).token());
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
}

// Seeded sampling through plans reproduces `Generate` with the same seed.
TEST(StepExecutor, SeededSamplingEqualsGenerate) {
  const std::vector<int32_t> prompt = {7, 8, 9, 10};
  auto engine = LoadEngine("llama_f32");
  GenerationParams gp;
  gp.max_tokens = 6;
  gp.ignore_eos = true;
  gp.sampling.temperature = 1.0f;
  gp.sampling.seed = 1234;
  std::vector<int32_t> want;
  auto rg = Generate(*engine, 1, prompt, gp);
  ASSERT_TRUE(rg.ok()) << rg.status();
  for (const auto& t : rg->tokens) want.push_back(t.id);

  StepExecutor ex(std::move(engine));
  std::vector<int32_t> got;
  std::vector<int32_t> next = prompt;
  int64_t pos = 0;
  for (int i = 0; i < 6; ++i) {
    proto::StepPlan p;
    proto::StepSequence s = Seq(3, next, pos, true, i);
    s.mutable_sampling()->set_temperature(1.0f);
    s.mutable_sampling()->set_seed(1234);
    *p.add_sequences() = s;
    auto r = ex.Run(p);
    ASSERT_TRUE(r.ok()) << r.status();
    pos += static_cast<int64_t>(next.size());
    got.push_back(r->results(0).token());
    next = {got.back()};
  }
  EXPECT_EQ(got, want);
}

TEST(StepExecutor, PromptLogprobsAndTopLogprobs) {
  StepExecutor ex(LoadEngine("llama_f32"));
  proto::StepPlan p;
  proto::StepSequence s = Seq(1, {1, 2, 3, 4, 5}, 0, true);
  s.set_prompt_logprobs(true);
  s.mutable_sampling()->set_top_logprobs(3);
  *p.add_sequences() = s;
  auto r = ex.Run(p);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& res = r->results(0);
  ASSERT_EQ(res.prompt_logprobs_size(), 4);
  for (float lp : res.prompt_logprobs()) EXPECT_LE(lp, 0.0f);
  ASSERT_EQ(res.top_ids_size(), 3);
  EXPECT_EQ(res.top_ids(0), res.token());  // greedy picks the most likely
  EXPECT_FLOAT_EQ(res.top_logprobs(0), res.logprob());
  EXPECT_GE(res.top_logprobs(0), res.top_logprobs(1));
  EXPECT_GE(res.top_logprobs(1), res.top_logprobs(2));
}

TEST(StepExecutor, LogitBiasSteersSampling) {
  StepExecutor ex(LoadEngine("llama_f32"));
  proto::StepPlan p;
  proto::StepSequence s = Seq(1, {1, 2, 3}, 0, true);
  (*s.mutable_sampling()->mutable_logit_bias())[42] = 100.0f;
  *p.add_sequences() = s;
  auto r = ex.Run(p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results(0).token(), 42);
}

// A mask of allowed tokens (constrained decoding): whatever the sampler,
// only allowed tokens come out, and a lone allowed token always does; the
// reported log-prob is still the model's.
TEST(StepExecutor, AllowedTokensConfineSampling) {
  StepExecutor ex(LoadEngine("llama_f32"));
  const int64_t vocab = ex.engine().config().vocab_size;
  auto mask = [&](std::vector<int32_t> ids) {
    std::string m(static_cast<size_t>((vocab + 7) / 8), '\0');
    for (int32_t id : ids) m[static_cast<size_t>(id / 8)] |= static_cast<char>(1 << (id % 8));
    return m;
  };
  const std::vector<int32_t> allowed = {3, 17, 40, static_cast<int32_t>(vocab - 1)};
  for (const float temperature : {0.0f, 1.0f, 5.0f}) {
    for (uint64_t seed = 0; seed < 8; ++seed) {
      proto::StepPlan p;
      proto::StepSequence s = Seq(1, {1, 2, 3}, 0, true);
      s.mutable_sampling()->set_temperature(temperature);
      s.mutable_sampling()->set_seed(seed);
      s.mutable_sampling()->set_allowed_tokens(mask(allowed));
      *p.add_sequences() = s;
      p.add_free_seq_ids(1);
      auto r = ex.Run(p);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), r->results(0).token()), allowed.end())
          << r->results(0).token() << " at temperature " << temperature;
    }
  }
  // One allowed token wins even against a large bias for another.
  proto::StepPlan p;
  proto::StepSequence s = Seq(2, {1, 2, 3}, 0, true);
  s.mutable_sampling()->set_allowed_tokens(mask({5}));
  (*s.mutable_sampling()->mutable_logit_bias())[6] = 1000.0f;
  *p.add_sequences() = s;
  auto r = ex.Run(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->results(0).token(), 5);
  EXPECT_LT(r->results(0).logprob(), 0.0f);
  EXPECT_TRUE(std::isfinite(r->results(0).logprob()));
}

TEST(StepExecutor, RejectsBadPlansWithoutRunning) {
  StepExecutor ex(LoadEngine("llama_f32"));
  auto bad = [&](proto::StepSequence s) {
    proto::StepPlan p;
    *p.add_sequences() = s;
    return ex.Run(p).status().code();
  };
  proto::StepSequence s = Seq(1, {1, 2}, 0, true);
  s.mutable_sampling()->set_temperature(-1);
  EXPECT_EQ(bad(s), absl::StatusCode::kInvalidArgument);
  s = Seq(1, {1, 2}, 0, true);
  (*s.mutable_sampling()->mutable_logit_bias())[1 << 30] = 1.0f;
  EXPECT_EQ(bad(s), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(Seq(1, {1 << 30}, 0, true)), absl::StatusCode::kInvalidArgument);
  // A mask of the wrong size, or one that allows nothing.
  const size_t mask_bytes = static_cast<size_t>((ex.engine().config().vocab_size + 7) / 8);
  s = Seq(1, {1, 2}, 0, true);
  s.mutable_sampling()->set_allowed_tokens(std::string(mask_bytes + 1, '\xff'));
  EXPECT_EQ(bad(s), absl::StatusCode::kInvalidArgument);
  s.mutable_sampling()->set_allowed_tokens(std::string(mask_bytes, '\0'));
  EXPECT_EQ(bad(s), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(Seq(1, {1}, 3, true)), absl::StatusCode::kInvalidArgument);
  // An n_g for a model without CC rows, or a negative one.
  for (int64_t n_g : {int64_t{4}, int64_t{-1}}) {
    proto::StepPlan p;
    *p.add_sequences() = Seq(1, {1, 2}, 0, true);
    p.set_prefill_gpu_tokens(n_g);
    EXPECT_EQ(ex.Run(p).status().code(), absl::StatusCode::kInvalidArgument) << n_g;
  }
  EXPECT_EQ(ex.engine().SequenceLength(1), 0);
}

// An attention offload that records which sequences it was given.
class RecordingAttention : public AttentionOffload {
 public:
  explicit RecordingAttention(std::unique_ptr<LocalAttentionOffload> inner)
      : inner_(std::move(inner)) {}
  absl::Status Submit(int64_t layer, const std::vector<AttentionJob>& jobs) override {
    for (const AttentionJob& j : jobs) seen.push_back(j.seq_id);
    return inner_->Submit(layer, jobs);
  }
  absl::Status Collect(int64_t layer, const std::vector<AttentionJob>& jobs) override {
    return inner_->Collect(layer, jobs);
  }
  void Free(int64_t seq_id) override {
    freed.push_back(seq_id);
    inner_->Free(seq_id);
  }
  const CpuKvCache& cache() const { return inner_->cache(); }

  std::vector<int64_t> seen, freed;

 private:
  std::unique_ptr<LocalAttentionOffload> inner_;
};

// Plans that mark some sequences cpu_attention run those sequences'
// attention on the engine's attention offload (their KV only there), give
// the tokens of the all-local run, and free_seq_ids frees their CPU KV.
TEST(StepExecutor, CpuAttentionFromThePlanUsesTheOffload) {
  const std::vector<int32_t> a = {5, 9, 13, 2, 7, 1, 88}, b = {100, 3, 4};
  const int kTokens = 6;
  auto run = [&](StepExecutor& ex, bool a_cpu, bool b_cpu, std::vector<int32_t>* got_a,
                 std::vector<int32_t>* got_b) {
    proto::StepPlan p0;
    *p0.add_sequences() = Seq(1, {a.begin(), a.begin() + 4}, 0, false);
    p0.mutable_sequences(0)->set_cpu_attention(a_cpu);
    ASSERT_TRUE(ex.Run(p0).ok());
    proto::StepPlan p1;
    *p1.add_sequences() = Seq(1, {a.begin() + 4, a.end()}, 4, true);
    *p1.add_sequences() = Seq(2, b, 0, true);
    p1.mutable_sequences(0)->set_cpu_attention(a_cpu);
    p1.mutable_sequences(1)->set_cpu_attention(b_cpu);
    auto r1 = ex.Run(p1);
    ASSERT_TRUE(r1.ok()) << r1.status();
    got_a->push_back(r1->results(0).token());
    got_b->push_back(r1->results(1).token());
    for (int i = 1; i < kTokens; ++i) {
      proto::StepPlan p;
      *p.add_sequences() = Seq(2, {got_b->back()}, static_cast<int64_t>(b.size()) + i - 1, true, i);
      *p.add_sequences() = Seq(1, {got_a->back()}, static_cast<int64_t>(a.size()) + i - 1, true, i);
      p.mutable_sequences(0)->set_cpu_attention(b_cpu);
      p.mutable_sequences(1)->set_cpu_attention(a_cpu);
      auto r = ex.Run(p);
      ASSERT_TRUE(r.ok()) << r.status();
      got_b->push_back(r->results(0).token());
      got_a->push_back(r->results(1).token());
    }
  };
  std::vector<int32_t> want_a, want_b;
  {
    StepExecutor ex(LoadEngine("qwen2_moe_f32"));
    run(ex, false, false, &want_a, &want_b);
  }

  StepExecutor ex(LoadEngine("qwen2_moe_f32"));
  auto local = LocalAttentionOffload::Create(CpuAttentionShapeFor(ex.engine().config(), 16, 256));
  ASSERT_TRUE(local.ok()) << local.status();
  RecordingAttention offload(std::move(*local));
  ex.engine().SetAttentionOffload(&offload);
  const int64_t blocks = ex.engine().free_kv_blocks();
  std::vector<int32_t> got_a, got_b;
  run(ex, true, false, &got_a, &got_b);
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  // Only sequence 1 went to the offload; only sequence 2 holds local blocks.
  EXPECT_EQ(std::count(offload.seen.begin(), offload.seen.end(), 2), 0);
  EXPECT_GT(std::count(offload.seen.begin(), offload.seen.end(), 1), 0);
  EXPECT_EQ(ex.engine().free_kv_blocks(), blocks - 1);  // b: 3 + 6 tokens in one block
  EXPECT_TRUE(offload.cache().Has(1));

  // Freeing through the plan frees the CPU KV; the ids come back swapped.
  proto::StepPlan free;
  free.add_free_seq_ids(1);
  free.add_free_seq_ids(2);
  ASSERT_TRUE(ex.Run(free).ok());
  EXPECT_EQ(offload.freed, std::vector<int64_t>{1});
  EXPECT_EQ(offload.cache().num_sequences(), 0);
  EXPECT_EQ(ex.engine().free_kv_blocks(), blocks);
  got_a.clear();
  got_b.clear();
  run(ex, false, true, &got_a, &got_b);
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  EXPECT_TRUE(offload.cache().Has(2));
  EXPECT_FALSE(offload.cache().Has(1));

  // A plan that moves a live sequence is rejected, and one asking for CPU
  // attention on an engine without an offload fails, without running.
  proto::StepPlan move;
  *move.add_sequences() = Seq(2, {got_b.back()}, static_cast<int64_t>(b.size()) + kTokens - 1, true);
  EXPECT_EQ(ex.Run(move).status().code(), absl::StatusCode::kInvalidArgument);
  ex.engine().SetAttentionOffload(nullptr);
  proto::StepPlan nowhere;
  *nowhere.add_sequences() = Seq(9, {1, 2}, 0, true);
  nowhere.mutable_sequences(0)->set_cpu_attention(true);
  EXPECT_EQ(ex.Run(nowhere).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ex.engine().SequenceLength(9), 0);
}

}  // namespace
}  // namespace tandem
