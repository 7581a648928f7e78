// The engine with CPU attention across the attention ring pair to an
// AttentionServer on a thread of this process (the cpu_worker's code, real
// rings): logits equal the in-process offload's, the golden greedy tokens
// come out with slots so small that prefill chunks span several requests,
// freed ids travel with the next request, and a server that stops answering
// fails the step with kUnavailable, not a hang.
#include "gpu_worker/engine/shm_attention_offload.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/shm/attention_wire.h"
#include "cpu_worker/service/attention_server.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/generator.h"
#include "gpu_worker/engine/local_attention_offload.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

std::string ModelDir(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

std::unique_ptr<Engine> Load(const std::string& name) {
  auto ckpt = Checkpoint::Open(ModelDir(name));
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  EngineOptions o;
  o.max_context = 128;
  o.max_sequences = 2;
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

// A cpu_worker's attention service on a thread: opens the rings once they
// exist, serves until stopped or the rings close.
class ServerThread {
 public:
  ServerThread(const ModelConfig& config, const std::string& prefix, int64_t max_tokens = 0) {
    thread_ = std::thread([this, config, prefix, max_tokens] {
      auto server = AttentionServer::Create(config, max_tokens);
      if (!server.ok()) return void(status_ = server.status());
      // The request ring is created just before the reply ring: wait for each.
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      auto open = [&](const std::string& name, shm::RingRole role) {
        absl::StatusOr<std::unique_ptr<shm::SlotRing>> r;
        do {
          r = shm::SlotRing::Open(name, role);
          if (!r.ok()) absl::SleepFor(absl::Milliseconds(5));
        } while (!r.ok() && absl::Now() < deadline && !stop_.load());
        return r;
      };
      auto req = open(prefix + "-attn-req", shm::RingRole::kConsumer);
      if (!req.ok()) return void(status_ = req.status());
      auto rep = open(prefix + "-attn-rep", shm::RingRole::kProducer);
      if (!rep.ok()) return void(status_ = rep.status());
      status_ = (*server)->Serve(**req, **rep, stop_, absl::Milliseconds(10));
      // Leaving closes the rings (the endpoints' destructors), as a
      // cpu_worker that exits does.
    });
  }
  ~ServerThread() { Stop().IgnoreError(); }
  absl::Status Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  std::atomic<bool> stop_{false};
  absl::Status status_;
  std::thread thread_;
};

std::unique_ptr<ShmAttentionOffload> MakeOffload(const Engine& e, const std::string& prefix,
                                                 int64_t slot_bytes, int64_t capacity) {
  ShmAttentionOptions o;
  o.name_prefix = prefix;
  o.shape = CpuAttentionShapeFor(e.config(), 16, capacity);
  o.slot_bytes = slot_bytes;
  o.slot_count = 2;
  o.timeout = absl::Seconds(5);
  auto off = ShmAttentionOffload::Create(o);
  EXPECT_TRUE(off.ok()) << off.status();
  return off.ok() ? std::move(*off) : nullptr;
}

// The smallest slot the offload accepts: frees room plus one token.
int64_t MinSlot(const ModelConfig& c) {
  return wire::AttentionRequestBytes(4096, 1, 1, c.q_dim(), c.kv_dim());
}

TEST(ShmAttentionOffload, SameLogitsAndGoldenTokensAsInProcess) {
  const std::string prefix = absl::StrCat("/tandem-attn-test-", getpid());
  auto engine = Load("llama_f32");
  const ModelConfig& c = engine->config();
  ServerThread server(c, prefix);
  auto offload = MakeOffload(*engine, prefix, MinSlot(c), 256);
  ASSERT_NE(offload, nullptr);
  ASSERT_TRUE(offload->WaitForWorker(absl::Seconds(30)).ok());

  // Reference: the same chunks on the in-process offload.
  auto ref = Load("llama_f32");
  auto local = LocalAttentionOffload::Create(CpuAttentionShapeFor(c, 16, 256));
  ASSERT_TRUE(local.ok());
  ref->SetAttentionOffload(local->get());
  engine->SetAttentionOffload(offload.get());

  std::ifstream f(ModelDir("llama_f32") + "/golden.json");
  const auto golden = nlohmann::json::parse(f);
  const auto prompt = golden["greedy"][2]["prompt"].get<std::vector<int32_t>>();  // 90 tokens
  ASSERT_GT(prompt.size(), 80u);  // more than one small slot holds
  // A whole-prompt chunk (split across requests) mixed with a local sequence.
  SequenceChunk cpu{1, prompt, 0, true, true};
  SequenceChunk gpu{2, {7, 8, 9}, 0, true, false};
  auto r = engine->Step({gpu, cpu});
  auto rr = ref->Step({gpu, cpu});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(rr.ok()) << rr.status();
  EXPECT_EQ(r->logits, rr->logits);
  engine->FreeSequence(1);
  engine->FreeSequence(2);

  // Golden greedy continuations with chunked prefill, id 1 reused at once.
  for (const auto& g : golden["greedy"]) {
    GenerationParams p;
    p.max_tokens = static_cast<int64_t>(g["continuation"].size());
    p.ignore_eos = true;
    p.prefill_chunk = 37;
    p.cpu_attention = true;
    auto gen = Generate(*engine, 1, g["prompt"].get<std::vector<int32_t>>(), p);
    ASSERT_TRUE(gen.ok()) << gen.status();
    std::vector<int32_t> got;
    for (const auto& t : gen->tokens) got.push_back(t.id);
    EXPECT_EQ(got, g["continuation"].get<std::vector<int32_t>>());
  }
  ASSERT_TRUE(server.Stop().ok());
}

TEST(ShmAttentionOffload, AServerThatStopsFailsTheStepPromptly) {
  const std::string prefix = absl::StrCat("/tandem-attn-stop-", getpid());
  auto engine = Load("qwen2_f32");
  auto server = std::make_unique<ServerThread>(engine->config(), prefix);
  auto offload = MakeOffload(*engine, prefix, 1 << 20, 256);
  ASSERT_NE(offload, nullptr);
  ASSERT_TRUE(offload->WaitForWorker(absl::Seconds(30)).ok());
  engine->SetAttentionOffload(offload.get());
  SequenceChunk c{1, {1, 2, 3, 4}, 0, false, true};
  ASSERT_TRUE(engine->Step({c}).ok());
  server.reset();  // closes its ring ends
  const auto t0 = std::chrono::steady_clock::now();
  SequenceChunk next{1, {5}, 4, false, true};
  EXPECT_EQ(engine->Step({next}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_EQ(engine->SequenceLength(1), 4);  // the failed step changed nothing
  // Local sequences still run.
  SequenceChunk local{2, {1, 2, 3}, 0, false, false};
  EXPECT_TRUE(engine->Step({local}).ok());
}

TEST(ShmAttentionOffload, ConfigureRefusalAndBadOptions) {
  const std::string prefix = absl::StrCat("/tandem-attn-refuse-", getpid());
  auto engine = Load("qwen2_f32");
  ServerThread server(engine->config(), prefix, /*max_tokens=*/64);
  auto offload = MakeOffload(*engine, prefix, 1 << 20, 256);  // asks for more than 64
  ASSERT_NE(offload, nullptr);
  absl::Status s;
  for (int i = 0; i < 300; ++i) {
    s = offload->WaitForWorker(absl::Milliseconds(100));
    if (!absl::IsDeadlineExceeded(s)) break;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // Submitting on an offload that was never configured is refused.
  AttentionJob job;
  EXPECT_EQ(offload->Submit(0, {job}).code(), absl::StatusCode::kFailedPrecondition);

  ShmAttentionOptions o;
  o.name_prefix = prefix + "-bad";
  o.shape = CpuAttentionShapeFor(engine->config(), 16, 256);
  o.slot_bytes = 4096;  // not even one token with its frees
  EXPECT_EQ(ShmAttentionOffload::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.slot_bytes = 1 << 20;
  o.shape.kv.capacity_tokens = 0;
  EXPECT_EQ(ShmAttentionOffload::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
