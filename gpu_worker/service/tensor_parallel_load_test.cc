// A tensor-parallel group of workers as the coordinator sets it up: each
// rank gets a LoadModelRequest naming the group, and every rank runs the
// same StepPlans. The ranks' tokens equal a single worker's; bad groups are
// refused at load, without waiting for peers.
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shm/shm_segment.h"
#include "gpu_worker/engine/shm_all_reduce.h"
#include "gpu_worker/service/model_loader.h"
#include "gpu_worker/service/worker_device.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

std::string ModelPath(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

proto::LoadModelRequest Request(const std::string& model, int rank, int size,
                                const std::string& group) {
  proto::LoadModelRequest req;
  req.set_model_path(ModelPath(model));
  req.set_max_context(64);
  req.set_kv_blocks(16);
  req.set_block_size(8);
  req.set_attach_timeout_ms(30000);
  if (size != 0 || rank != 0) {
    req.mutable_tensor_parallel()->set_rank(rank);
    req.mutable_tensor_parallel()->set_size(size);
    req.mutable_tensor_parallel()->set_group_id(group);
  }
  return req;
}

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// Two sequences: a prefill step, then decode steps feeding back the sampled
// tokens; temperature 0 is greedy.
absl::StatusOr<Trace> RunPlans(StepExecutor& ex, float temperature) {
  std::vector<std::vector<int32_t>> prompts = {{5, 9, 13, 2, 7, 1, 88}, {100, 3, 4}};
  std::vector<int64_t> pos = {0, 0};
  Trace t;
  for (int step = 0; step < 6; ++step) {
    proto::StepPlan plan;
    plan.set_step(step);
    for (int i = 0; i < 2; ++i) {
      proto::StepSequence* s = plan.add_sequences();
      s->set_seq_id(i + 1);
      for (int32_t tok : prompts[i]) s->add_tokens(tok);
      s->set_start_pos(pos[i]);
      s->set_sample(true);
      s->set_generated(step);
      s->mutable_sampling()->set_temperature(temperature);
      s->mutable_sampling()->set_top_p(1.0f);
      s->mutable_sampling()->set_seed(1234);
      s->mutable_sampling()->set_top_logprobs(-1);
    }
    auto r = ex.Run(plan);
    if (!r.ok()) return r.status();
    for (int i = 0; i < 2; ++i) {
      const proto::SequenceResult& res = r->results(i);
      t.tokens.push_back(res.token());
      t.logprobs.push_back(res.logprob());
      pos[i] += static_cast<int64_t>(prompts[i].size());
      prompts[i] = {res.token()};
    }
  }
  return t;
}

std::vector<absl::StatusOr<Trace>> RunGroup(const std::string& model, int size,
                                            float temperature) {
  const std::string group = shm::MakeSegmentName("test-tpw");
  std::vector<absl::StatusOr<Trace>> out(static_cast<size_t>(size),
                                         absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto m = LoadModelForWorker(Request(model, r, size, group));
      if (!m.ok()) {
        out[r] = m.status();
        return;
      }
      out[r] = RunPlans(*m->executor, temperature);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

class TensorParallelWorkers : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelWorkers, RanksSampleWhatASingleWorkerSamples) {
  auto single = LoadModelForWorker(Request(GetParam(), 0, 0, ""));
  ASSERT_TRUE(single.ok()) << single.status();
  auto want = RunPlans(*single->executor, 0.0f);
  ASSERT_TRUE(want.ok()) << want.status();

  const auto greedy = RunGroup(GetParam(), 2, 0.0f);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(greedy[r].ok()) << "rank " << r << ": " << greedy[r].status();
    EXPECT_EQ(greedy[r]->tokens, want->tokens) << "rank " << r;
    for (size_t i = 0; i < want->logprobs.size(); ++i) {
      EXPECT_NEAR(greedy[r]->logprobs[i], want->logprobs[i], 1e-4) << "rank " << r << " #" << i;
    }
  }
  // Seeded sampling: the ranks hold the same logits to the bit, so they
  // draw the same tokens (the coordinator may read any rank's result).
  const auto sampled = RunGroup(GetParam(), 2, 1.0f);
  ASSERT_TRUE(sampled[0].ok() && sampled[1].ok());
  EXPECT_EQ(sampled[0]->tokens, sampled[1]->tokens);
  EXPECT_EQ(sampled[0]->logprobs, sampled[1]->logprobs);
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelWorkers,
                         ::testing::Values("llama_f32", "qwen2_moe_f32"),
                         [](const auto& info) { return info.param; });

TEST(TensorParallelWorkersLoad, BadGroupsAreRefusedWithoutWaiting) {
  const std::string group = shm::MakeSegmentName("test-tpb");
  const auto start = std::chrono::steady_clock::now();
  auto code = [](const proto::LoadModelRequest& req) {
    return LoadModelForWorker(req).status().code();
  };
  EXPECT_EQ(code(Request("llama_f32", 2, 2, group)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Request("llama_f32", -1, 2, group)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Request("llama_f32", 1, 0, group)), absl::StatusCode::kInvalidArgument);
  // 3 ranks do not divide the 4 query heads: refused before the group forms.
  EXPECT_EQ(code(Request("llama_f32", 1, 3, group)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Request("llama_f32", 0, 2, "not-a-segment-name")),
            absl::StatusCode::kInvalidArgument);
  proto::LoadModelRequest with_cpu = Request("llama_f32", 0, 2, group);
  with_cpu.set_cpu_kv_tokens(64);
  with_cpu.set_data_segment("/tandem-test-tpb-rings");
  EXPECT_EQ(code(with_cpu), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(shm::ListSegments(group).empty());
}

// A device that joins its own kind of group (a GPU's NCCL) is asked to,
// with the request's id, rank and size; what it joins is the group the
// engine sums through. Here it joins the host's shared-memory group under
// the id it is given, so the ranks must agree with a single worker.
TEST(TensorParallelWorkerDevice, TheDeviceJoinsTheGroup) {
  auto single = LoadModelForWorker(Request("qwen2_f32", 0, 0, ""));
  ASSERT_TRUE(single.ok()) << single.status();
  auto want = RunPlans(*single->executor, 0.0f);
  ASSERT_TRUE(want.ok()) << want.status();
  const std::string group = shm::MakeSegmentName("test-tpd");
  std::atomic<int> joins{0};
  WorkerDevice device;
  device.join_group = [&](const std::string& id, int rank,
                          int size) -> absl::StatusOr<std::unique_ptr<AllReduce>> {
    EXPECT_EQ(id, group);
    EXPECT_EQ(size, 2);
    ++joins;
    auto g = ShmAllReduce::Create(id, rank, size, {});
    if (!g.ok()) return g.status();
    return std::unique_ptr<AllReduce>(std::move(*g));
  };
  std::vector<absl::StatusOr<Trace>> out(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto m = LoadModelForWorker(Request("qwen2_f32", r, 2, group), {}, device);
      if (!m.ok()) {
        out[r] = m.status();
        return;
      }
      out[r] = RunPlans(*m->executor, 0.0f);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(joins.load(), 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status();
    EXPECT_EQ(out[r]->tokens, want->tokens) << "rank " << r;
  }
  // A device that cannot join fails the load with its reason.
  device.join_group = [](const std::string&, int, int)
      -> absl::StatusOr<std::unique_ptr<AllReduce>> {
    return absl::UnimplementedError("no NCCL in this build");
  };
  auto m = LoadModelForWorker(Request("qwen2_f32", 1, 2, group), {}, device);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
}

}  // namespace
}  // namespace tandem
