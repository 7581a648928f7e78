// Steps split into micro-batches (EngineOptions::micro_batch_size,
// MoE-Lightning's mu): for every f32 architecture, on every test device
// (the host, the host posing as a GPU, each GPU), ragged batches of prefill
// chunks and decodes that mix CPU-attention and local sequences give the logits
// of the same batches run whole with all attention local, with FFN weights
// resident and streamed; the pipeline's order (the offload's attention of one
// micro-batch in flight while the device runs its neighbour's FFN); and the
// option's rules.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/local_attention_offload.h"
#include "gpu_worker/engine/testing/engine_test_util.h"
#include "gpu_worker/engine/testing/test_devices.h"
#include "gpu_worker/host/host_device.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr int64_t kContext = 64;
constexpr int64_t kSequences = 4;

std::string ModelsDir() { return std::string(TANDEM_TESTDATA_DIR) + "/models"; }

std::unique_ptr<Engine> Open(const std::string& name, EngineOptions o) {
  auto ckpt = Checkpoint::Open(ModelsDir() + "/" + name);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return nullptr;
  o.max_context = kContext;
  o.max_sequences = kSequences;
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::unique_ptr<LocalAttentionOffload> MakeOffload(const Engine& e) {
  auto o = LocalAttentionOffload::Create(
      CpuAttentionShapeFor(e.config(), 16, kSequences * kContext));
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? std::move(*o) : nullptr;
}

// Four sequences: prompts of different lengths fed in chunks of `chunk`
// tokens, sequences 0 and 2 on CPU attention; then greedy decodes (from the
// reference's logits, so both engines see the same tokens). Every row of
// every step must agree with `ref`, which runs the batches whole, all local.
void RunAgainstReference(Engine& engine, Engine& ref, int64_t steps,
                         double* worst) {
  const int64_t prompt_len[kSequences] = {9, 4, 13, 6};
  const int64_t chunk = 5;
  const int64_t vocab = engine.config().vocab_size;
  std::vector<std::vector<int32_t>> tokens(kSequences);
  for (int64_t s = 0; s < kSequences; ++s) {
    for (int64_t i = 0; i < prompt_len[s]; ++i) {
      tokens[static_cast<size_t>(s)].push_back(
          static_cast<int32_t>((7 * s + 3 * i + 1) % vocab));
    }
  }
  std::vector<int64_t> pos(kSequences, 0);
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<SequenceChunk> batch;
    for (int64_t s = 0; s < kSequences; ++s) {
      const auto& t = tokens[static_cast<size_t>(s)];
      const int64_t at = pos[static_cast<size_t>(s)];
      const int64_t n =
          std::min<int64_t>(chunk, static_cast<int64_t>(t.size()) - at);
      SequenceChunk c;
      c.seq_id = 100 + s;
      c.start_pos = at;
      c.tokens.assign(t.begin() + at, t.begin() + at + n);
      c.cpu_attention = s % 2 == 0;
      batch.push_back(std::move(c));
    }
    // Vary the micro-batches' make-up from step to step.
    std::rotate(batch.begin(), batch.begin() + step % kSequences, batch.end());
    auto r = engine.Step(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<SequenceChunk> local = batch;
    for (SequenceChunk& c : local) c.cpu_attention = false;
    auto want = ref.Step(local);
    ASSERT_TRUE(want.ok()) << want.status();
    for (size_t i = 0; i < batch.size(); ++i) {
      *worst = std::max(*worst,
                        testing::MaxRelativeError(r->Row(i), want->Row(i),
                                                  static_cast<size_t>(vocab)));
      const size_t s = static_cast<size_t>(batch[i].seq_id - 100);
      pos[s] += static_cast<int64_t>(batch[i].tokens.size());
      if (pos[s] == static_cast<int64_t>(tokens[s].size())) {
        const float* row = want->Row(i);
        tokens[s].push_back(
            static_cast<int32_t>(std::max_element(row, row + vocab) - row));
      }
    }
  }
}

class MicroBatches : public ::testing::TestWithParam<std::string> {};

TEST_P(MicroBatches, EqualWholeBatchesWithResidentAndStreamedWeights) {
  const std::string& model = GetParam();
  for (const testing::TestDevice& d : testing::TestDevicesNoting()) {
    for (int64_t mu : {1, 2, 3}) {
      for (bool streamed : {false, true}) {
        EngineOptions o;
        o.micro_batch_size = mu;
        o.device = d.make;
        auto ref = Open(model, EngineOptions{});
        ASSERT_NE(ref, nullptr);
        for (int64_t l = 0; streamed && l < ref->config().num_layers; ++l) {
          o.streamed_ffn_layers.push_back(l);  // every layer's FFN
        }
        o.stream_page_bytes = 4096;
        auto engine = Open(model, o);
        ASSERT_NE(engine, nullptr) << d.name;
        auto offload = MakeOffload(*engine);
        engine->SetAttentionOffload(offload.get());
        double worst = 0;
        RunAgainstReference(*engine, *ref, 8, &worst);
        std::printf("%s on %s, mu %lld%s: worst relative logit error %.2e\n",
                    model.c_str(), d.name.c_str(), static_cast<long long>(mu),
                    streamed ? ", FFN streamed" : "", worst);
        EXPECT_LT(worst, testing::IsGpu(d) ? 3e-2 : 1e-5) << d.name;
        if (streamed) {
          ASSERT_NE(engine->weight_pager(), nullptr);
          // Each streamed layer is staged once per step, whatever mu is (and
          // the next step's first two are on their way).
          const int64_t n =
              static_cast<int64_t>(engine->weight_pager()->layers().size());
          EXPECT_EQ(engine->weight_pager()->stats().layers_streamed,
                    8 * n + std::min<int64_t>(n, 2));
        }
        engine->SetAttentionOffload(nullptr);
        engine.reset();  // before the offload it points to
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(F32Architectures, MicroBatches,
                         ::testing::ValuesIn(testing::F32TestModels()),
                         [](const auto& info) { return info.param; });

TEST(MicroBatchEngine, EveryArchitectureIsCovered) {
  EXPECT_EQ(testing::F32TestModels().size(), 6u);
}

// The device's MLPs and the offload's submits and collects, in call order.
struct Log {
  std::vector<std::string> events;
};

class LoggingDevice final : public HostDevice {
 public:
  explicit LoggingDevice(Log* log) : log_(log) {}
  absl::Status Mlp(const ops::MlpWeights& w, const float* x, int64_t rows,
                   float* out) override {
    log_->events.push_back("mlp");
    return HostDevice::Mlp(w, x, rows, out);
  }

 private:
  Log* log_;
};

class LoggingOffload final : public AttentionOffload {
 public:
  LoggingOffload(AttentionOffload* inner, Log* log)
      : inner_(inner), log_(log) {}
  absl::Status Submit(int64_t layer,
                      const std::vector<AttentionJob>& jobs) override {
    log_->events.push_back(Name("submit", layer, jobs));
    return inner_->Submit(layer, jobs);
  }
  absl::Status Collect(int64_t layer,
                       const std::vector<AttentionJob>& jobs) override {
    log_->events.push_back(Name("collect", layer, jobs));
    return inner_->Collect(layer, jobs);
  }
  void Free(int64_t seq_id) override { inner_->Free(seq_id); }

 private:
  static std::string Name(const char* what, int64_t layer,
                          const std::vector<AttentionJob>& j) {
    std::string s = std::string(what) + " " + std::to_string(layer);
    for (const AttentionJob& x : j) s += " " + std::to_string(x.seq_id);
    return s;
  }
  AttentionOffload* inner_;
  Log* log_;
};

TEST(MicroBatchEngine, OffloadedAttentionOverlapsTheNeighboursFfn) {
  Log log;
  EngineOptions o;
  o.micro_batch_size = 1;
  o.device = [&log] {
    return absl::StatusOr<std::unique_ptr<Device>>(
        std::make_unique<LoggingDevice>(&log));
  };
  auto engine = Open("llama_f32", o);
  ASSERT_NE(engine, nullptr);
  auto inner = MakeOffload(*engine);
  LoggingOffload offload(inner.get(), &log);
  engine->SetAttentionOffload(&offload);
  std::vector<SequenceChunk> batch = {{1, {5, 6}, 0, false, true},
                                      {2, {7}, 0, false, true},
                                      {3, {8, 9, 10}, 0, false, true}};
  log.events.clear();
  ASSERT_TRUE(engine->Step(batch).ok());
  // Layer 0: sequence 2's attention is sent before sequence 1's MLP runs and
  // collected after it; likewise 3 around 2's.
  const std::vector<std::string> layer0 = {
      "submit 0 1", "collect 0 1", "submit 0 2",  "mlp", "collect 0 2",
      "submit 0 3", "mlp",         "collect 0 3", "mlp"};
  ASSERT_GE(log.events.size(), layer0.size());
  EXPECT_EQ(
      std::vector<std::string>(log.events.begin(), log.events.begin() + 9),
      layer0);
  const int64_t layers = engine->config().num_layers;
  EXPECT_EQ(log.events.size(), static_cast<size_t>(9 * layers));

  // One micro-batch: the offload's work overlaps the local attention only.
  ASSERT_TRUE(engine->SetMicroBatchSize(0).ok());
  for (SequenceChunk& c : batch) {
    c.start_pos = static_cast<int64_t>(c.tokens.size());
    c.tokens = {11};
  }
  log.events.clear();
  ASSERT_TRUE(engine->Step(batch).ok());
  EXPECT_EQ(
      std::vector<std::string>(log.events.begin(), log.events.begin() + 3),
      (std::vector<std::string>{"submit 0 1 2 3", "collect 0 1 2 3", "mlp"}));
  engine->SetAttentionOffload(nullptr);
}

// `r`'s rows equal those of `ref` running `batch` with all attention local.
void ExpectLikeAllLocal(const StepResult& r, Engine& ref,
                        const std::vector<SequenceChunk>& batch) {
  std::vector<SequenceChunk> local = batch;
  for (SequenceChunk& c : local) c.cpu_attention = false;
  auto want = ref.Step(local);
  ASSERT_TRUE(want.ok()) << want.status();
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_LT(testing::MaxRelativeError(r.Row(i), want->Row(i),
                                        static_cast<size_t>(r.vocab)),
              1e-5)
        << i;
  }
}

// Per-step sizes (Neo's sub-batches) in place of mu: the same logits as the
// whole batch; sizes that do not add up change nothing.
TEST(MicroBatchEngine, PerStepSizesSplitTheStep) {
  auto engine = Open("qwen2_moe_f32", EngineOptions{});
  auto ref = Open("qwen2_moe_f32", EngineOptions{});
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(ref, nullptr);
  auto offload = MakeOffload(*engine);
  engine->SetAttentionOffload(offload.get());
  std::vector<SequenceChunk> batch = {{1, {5, 6, 7}, 0, false, false},
                                      {2, {8}, 0, false, true},
                                      {3, {9, 10}, 0, false, true}};
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{1, 1}, std::vector<int64_t>{3, 0},
        std::vector<int64_t>{4}}) {
    EXPECT_EQ(engine->Step(batch, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
    for (int64_t id : {1, 2, 3}) EXPECT_EQ(engine->SequenceLength(id), 0);
  }
  auto r = engine->Step(batch, std::vector<int64_t>{1, 2});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectLikeAllLocal(*r, *ref, batch);
  engine->SetAttentionOffload(nullptr);
  engine.reset();
}

// A device whose attention fails on demand.
class FailingAttendDevice final : public HostDevice {
 public:
  explicit FailingAttendDevice(bool* fail) : fail_(fail) {}
  absl::Status Attend(const ops::PagedKvLayer& kv, const float* q,
                      const float* k, const float* v, int64_t heads,
                      float scale, const std::vector<AttentionChunk>& chunks,
                      float* out) override {
    if (*fail_) return absl::InternalError("attention failed");
    return HostDevice::Attend(kv, q, k, v, heads, scale, chunks, out);
  }

 private:
  bool* fail_;
};

// A step that fails while the offload holds a micro-batch's attention
// waits for it, so the offload takes the next step's: the same chunks then
// run, with the logits of an engine that never failed.
TEST(MicroBatchEngine, AFailedStepLeavesTheOffloadFree) {
  bool fail = false;
  EngineOptions o;
  o.micro_batch_size = 1;
  o.device = [&fail] {
    return absl::StatusOr<std::unique_ptr<Device>>(
        std::make_unique<FailingAttendDevice>(&fail));
  };
  auto engine = Open("llama_f32", o);
  auto ref = Open("llama_f32", EngineOptions{});
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(ref, nullptr);
  auto offload = MakeOffload(*engine);
  engine->SetAttentionOffload(offload.get());
  // Sequence 1's attention is in flight when sequence 2's local one fails.
  const std::vector<SequenceChunk> batch = {{1, {5, 6}, 0, false, true},
                                            {2, {7}, 0, false, false}};
  fail = true;
  EXPECT_EQ(engine->Step(batch).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(engine->SequenceLength(1), 0);
  fail = false;
  auto r = engine->Step(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectLikeAllLocal(*r, *ref, batch);
  engine->SetAttentionOffload(nullptr);
  engine.reset();
}

TEST(MicroBatchEngine, RulesAreCleanErrors) {
  auto engine = Open("llama_f32", EngineOptions{});
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->SetMicroBatchSize(-1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->micro_batch_size(), 0);
  EXPECT_TRUE(engine->SetMicroBatchSize(2).ok());
  EXPECT_EQ(engine->micro_batch_size(), 2);

  // The expert cache plans a layer for all of a step's tokens at once.
  EngineOptions cached;
  cached.expert_cache.capacity_per_layer = 1;
  cached.micro_batch_size = 2;
  auto ckpt = Checkpoint::Open(ModelsDir() + "/mixtral_f32");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  cached.max_context = kContext;
  EXPECT_EQ(Engine::Create(std::move(*ckpt), cached).status().code(),
            absl::StatusCode::kFailedPrecondition);
  cached.micro_batch_size = 0;
  auto moe = Open("mixtral_f32", cached);
  ASSERT_NE(moe, nullptr);
  EXPECT_EQ(moe->SetMicroBatchSize(1).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem
