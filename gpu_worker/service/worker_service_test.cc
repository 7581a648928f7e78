// The Worker service over a real gRPC channel on 127.0.0.1: LoadModel, then
// Step plans give the tokens StepExecutor gives in-process and the golden
// greedy continuation; errors cross the wire with the right codes; Steps
// from several client threads are serialized; routed experts placed on a
// cpu_worker (an ExpertServer thread on the shm rings here) give the same
// tokens; a cpu_worker that never attaches is UNAVAILABLE, bounded.
#include "gpu_worker/service/worker_service.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/shm/slot_ring.h"
#include "cpu_worker/service/expert_server.h"
#include "gpu_worker/service/testing/fake_registry.h"
#include "grpcpp/create_channel.h"
#include "common/shm/expert_weight_store.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

std::string ModelDir(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

struct Golden {
  std::vector<int32_t> prompt, continuation;
};
Golden LoadGolden(const std::string& name) {
  std::ifstream f(ModelDir(name) + "/golden.json");
  const auto j = nlohmann::json::parse(f);
  return {j["greedy"][0]["prompt"].get<std::vector<int32_t>>(),
          j["greedy"][0]["continuation"].get<std::vector<int32_t>>()};
}

proto::LoadModelRequest LoadRequest(const std::string& name, int64_t sequences = 2) {
  proto::LoadModelRequest r;
  r.set_model_path(ModelDir(name));
  r.set_max_context(64);
  r.set_block_size(16);
  r.set_kv_blocks(sequences * 64 / 16);
  return r;
}

proto::StepPlan Plan(int64_t step, int64_t seq, const std::vector<int32_t>& tokens, int64_t start,
                     int64_t generated) {
  proto::StepPlan p;
  p.set_step(step);
  proto::StepSequence* s = p.add_sequences();
  s->set_seq_id(seq);
  for (int32_t t : tokens) s->add_tokens(t);
  s->set_start_pos(start);
  s->set_sample(true);
  s->set_generated(generated);
  s->mutable_sampling()->set_top_p(1.0f);
  return p;
}

class WorkerOverGrpc : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::StartServer(&service_, 0, &port_);
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    stub_ = proto::Worker::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                                       grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->Shutdown();
    server_->Wait();
  }

  grpc::Status Load(const proto::LoadModelRequest& req, proto::LoadModelResponse* resp = nullptr) {
    grpc::ClientContext ctx;
    proto::LoadModelResponse r;
    return stub_->LoadModel(&ctx, req, resp ? resp : &r);
  }
  grpc::Status Step(const proto::StepPlan& plan, proto::StepResult* result) {
    grpc::ClientContext ctx;
    return stub_->Step(&ctx, plan, result);
  }
  // Greedy generation of n tokens for `seq` over the wire; the tokens
  // (empty on an error, which is reported).
  std::vector<int32_t> Greedy(int64_t seq, const std::vector<int32_t>& prompt, size_t n,
                              std::vector<float>* logprobs = nullptr) {
    std::vector<int32_t> out;
    std::vector<int32_t> next = prompt;
    int64_t pos = 0;
    for (size_t i = 0; i < n; ++i) {
      proto::StepResult r;
      const grpc::Status s = Step(Plan(static_cast<int64_t>(i), seq, next, pos,
                                       static_cast<int64_t>(i)), &r);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok() || r.results_size() != 1) return {};
      pos += static_cast<int64_t>(next.size());
      out.push_back(r.results(0).token());
      if (logprobs) logprobs->push_back(r.results(0).logprob());
      next = {out.back()};
    }
    return out;
  }

  WorkerService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<proto::Worker::Stub> stub_;
};

class WorkerGolden : public WorkerOverGrpc, public ::testing::WithParamInterface<std::string> {};

TEST_P(WorkerGolden, StepsOverGrpcEqualExecutorAndGolden) {
  const Golden g = LoadGolden(GetParam());
  proto::LoadModelResponse resp;
  const grpc::Status s = Load(LoadRequest(GetParam()), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.kv_blocks(), 8);  // 2 sequences x 64 tokens / 16
  EXPECT_GT(resp.weight_bytes(), 0);

  std::vector<float> wire_lp;
  const std::vector<int32_t> wire = Greedy(7, g.prompt, g.continuation.size(), &wire_lp);
  EXPECT_EQ(wire, g.continuation);

  // The same plans on a StepExecutor in this process.
  auto ckpt = Checkpoint::Open(ModelDir(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EngineOptions eo;
  eo.max_context = 64;
  eo.max_sequences = 2;
  auto engine = Engine::Create(std::move(*ckpt), eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  StepExecutor local(std::move(*engine));
  std::vector<int32_t> next = g.prompt;
  int64_t pos = 0;
  for (size_t i = 0; i < wire.size(); ++i) {
    auto r = local.Run(Plan(static_cast<int64_t>(i), 7, next, pos, static_cast<int64_t>(i)));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->results(0).token(), wire[i]) << "step " << i;
    EXPECT_EQ(r->results(0).logprob(), wire_lp[i]) << "step " << i;
    pos += static_cast<int64_t>(next.size());
    next = {r->results(0).token()};
  }
  EXPECT_EQ(service_.steps_done(), static_cast<int64_t>(g.continuation.size()));
}

INSTANTIATE_TEST_SUITE_P(Models, WorkerGolden, ::testing::Values("llama_f32", "mixtral_f32"));

TEST_F(WorkerOverGrpc, StepBeforeLoadModelIsFailedPrecondition) {
  proto::StepResult r;
  EXPECT_EQ(Step(Plan(0, 1, {1, 2}, 0, 0), &r).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(WorkerOverGrpc, BadPlansAreInvalidArgumentAndHarmless) {
  ASSERT_TRUE(Load(LoadRequest("llama_f32")).ok());
  proto::StepResult r;
  proto::StepPlan hot = Plan(0, 1, {1, 2}, 0, 0);
  hot.mutable_sequences(0)->mutable_sampling()->set_temperature(-1);
  EXPECT_EQ(Step(hot, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Step(Plan(0, 1, {1, 1 << 20}, 0, 0), &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // token id past the vocabulary
  EXPECT_EQ(Step(Plan(0, 1, {1, 2}, 5, 0), &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // a gap before start_pos
  EXPECT_EQ(Step(Plan(0, 1, std::vector<int32_t>(65, 3), 0, 0), &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // past max_context
  // None of it touched the sequence: a good plan runs as if first.
  const Golden g = LoadGolden("llama_f32");
  EXPECT_EQ(Greedy(1, g.prompt, 4),
            std::vector<int32_t>(g.continuation.begin(), g.continuation.begin() + 4));
}

TEST_F(WorkerOverGrpc, LoadModelErrorsHaveTheirCodes) {
  proto::LoadModelRequest r = LoadRequest("llama_f32");
  r.set_model_path(ModelDir("no_such_model"));
  EXPECT_EQ(Load(r).error_code(), grpc::StatusCode::NOT_FOUND);
  r = LoadRequest("llama_f32");
  r.set_kv_blocks(-1);
  EXPECT_EQ(Load(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  r = LoadRequest("llama_f32");
  r.set_model_path("");
  EXPECT_EQ(Load(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  r = LoadRequest("llama_f32");  // dense: no experts to place
  r.mutable_cpu_placement()->add_experts()->add_experts(0);
  r.set_data_segment("/tandem-x");
  EXPECT_EQ(Load(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  r = LoadRequest("mixtral_f32");
  r.mutable_cpu_placement()->add_experts()->add_experts(0);  // no data_segment
  EXPECT_EQ(Load(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  r.set_data_segment("/tandem-x");
  r.mutable_cpu_placement()->mutable_experts(0)->add_experts(1000);
  EXPECT_EQ(Load(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(WorkerOverGrpc, ConcurrentStepsAreSerialized) {
  ASSERT_TRUE(Load(LoadRequest("llama_f32", 4)).ok());
  const Golden g = LoadGolden("llama_f32");
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { got[t] = Greedy(100 + t, g.prompt, g.continuation.size()); });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], g.continuation) << "thread " << t;
  EXPECT_EQ(service_.steps_done(), 4 * static_cast<int64_t>(g.continuation.size()));
}

TEST_F(WorkerOverGrpc, DrainStopsStepsUntilTheNextLoadModel) {
  ASSERT_TRUE(Load(LoadRequest("llama_f32")).ok());
  proto::StepResult r;
  ASSERT_TRUE(Step(Plan(0, 1, {1, 2}, 0, 0), &r).ok());
  {
    grpc::ClientContext ctx;
    proto::DrainResponse d;
    ASSERT_TRUE(stub_->Drain(&ctx, proto::DrainRequest(), &d).ok());
  }
  EXPECT_EQ(Step(Plan(1, 1, {3}, 2, 1), &r).error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(Load(LoadRequest("llama_f32")).ok());
  EXPECT_TRUE(Step(Plan(0, 1, {1, 2}, 0, 0), &r).ok());
}

TEST_F(WorkerOverGrpc, ShutdownNotifiesAndRefusesWork) {
  ASSERT_TRUE(Load(LoadRequest("llama_f32")).ok());
  EXPECT_FALSE(service_.WaitForShutdown(absl::ZeroDuration()));
  {
    grpc::ClientContext ctx;
    proto::DrainResponse d;
    ASSERT_TRUE(stub_->Shutdown(&ctx, proto::DrainRequest(), &d).ok());
  }
  EXPECT_TRUE(service_.WaitForShutdown(absl::Seconds(1)));
  proto::StepResult r;
  EXPECT_EQ(Step(Plan(0, 1, {1, 2}, 0, 0), &r).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Load(LoadRequest("llama_f32")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// The host device leaves naming a tensor-parallel group to the
// coordinator; a device that names its own (a GPU's NCCL id) answers with
// its id, bytes as made.
TEST_F(WorkerOverGrpc, NewTensorParallelGroupIsTheDevicesToMake) {
  auto ask = [&](int32_t size, std::string* id) {
    grpc::ClientContext ctx;
    proto::NewTensorParallelGroupRequest req;
    req.set_size(size);
    proto::NewTensorParallelGroupResponse resp;
    const grpc::Status s = stub_->NewTensorParallelGroup(&ctx, req, &resp);
    *id = resp.group_id();
    return s.error_code();
  };
  std::string id = "unset";
  EXPECT_EQ(ask(2, &id), grpc::StatusCode::OK);
  EXPECT_EQ(id, "");
  EXPECT_EQ(ask(1, &id), grpc::StatusCode::INVALID_ARGUMENT);
  WorkerDevice gpu_like;
  gpu_like.new_group_id = [] { return std::string("\x01\x00id", 4); };
  service_.SetDevice(gpu_like);
  EXPECT_EQ(ask(4, &id), grpc::StatusCode::OK);
  EXPECT_EQ(id, std::string("\x01\x00id", 4));
  gpu_like.new_group_id = []() -> absl::StatusOr<std::string> {
    return absl::InternalError("no NCCL");
  };
  service_.SetDevice(gpu_like);
  EXPECT_EQ(ask(2, &id), grpc::StatusCode::INTERNAL);
}

// A device that measures itself (a GPU) answers Profile with its own
// figures: its memory bandwidth, its GEMMs, the link to it.
TEST_F(WorkerOverGrpc, ProfileReportsTheDevicesOwnFigures) {
  WorkerDevice gpu_like;
  gpu_like.measure = [](HardwareProfile* hw) {
    hw->gpu.count = 1;
    hw->gpu.memory_bandwidth = 3.0e12;
    hw->gpu.bf16_flops = 700e12;
    hw->gpu.f32_flops = 50e12;
    hw->gpu.launch_overhead_s = 4e-6;
    hw->link.h2d_bandwidth = 55e9;
    return absl::OkStatus();
  };
  service_.SetDevice(gpu_like);
  grpc::ClientContext ctx;
  proto::ProfileResponse p;
  ASSERT_TRUE(stub_->Profile(&ctx, proto::ProfileRequest(), &p).ok());
  EXPECT_DOUBLE_EQ(p.read_bandwidth_gbs(), 3000);
  EXPECT_DOUBLE_EQ(p.gemm_gflops_bf16(), 700e3);
  EXPECT_DOUBLE_EQ(p.gemm_gflops_f32(), 50e3);
  EXPECT_DOUBLE_EQ(p.h2d_bandwidth_gbs(), 55);
  EXPECT_DOUBLE_EQ(p.launch_overhead_us(), 4);
  gpu_like.measure = [](HardwareProfile*) { return absl::UnavailableError("GPU fell off"); };
  service_.SetDevice(gpu_like);
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->Profile(&ctx2, proto::ProfileRequest(), &p).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(WorkerOverGrpc, ProfileMeasuresTheHost) {
  grpc::ClientContext ctx;
  proto::ProfileResponse p;
  ASSERT_TRUE(stub_->Profile(&ctx, proto::ProfileRequest(), &p).ok());
  EXPECT_GT(p.read_bandwidth_gbs(), 0.1);
  EXPECT_GT(p.h2d_bandwidth_gbs(), 0.1);
  EXPECT_GT(p.gemm_gflops_f32(), 0.1);
  EXPECT_GT(p.gemm_gflops_bf16(), 0.1);
  EXPECT_GT(p.launch_overhead_us(), 0);
  EXPECT_LT(p.launch_overhead_us(), 10000);
}

int CountShm(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (f.path().filename().string().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

// A cpu_worker in a thread: opens the rings once they exist and serves.
void ServeExperts(const std::string& model, const std::string& prefix,
                  const std::atomic<bool>& stop, absl::Status* result) {
  auto ckpt = Checkpoint::Open(model);
  if (!ckpt.ok()) return void(*result = ckpt.status());
  auto placement = ParseCpuExperts("all", (*ckpt)->config());
  if (!placement.ok()) return void(*result = placement.status());
  // As `tandem cpu-worker` does: the experts in a weight store the
  // gpu_worker maps and checks, then the rings.
  auto store = shm::BuildExpertWeightStore(**ckpt, *placement, shm::ExpertWeightStoreName(prefix));
  if (!store.ok()) return void(*result = store.status());
  auto server = ExpertServer::CreateFromStore(**store, (*ckpt)->config(), *placement,
                                              ops::ComputeType::kF32);
  if (!server.ok()) return void(*result = server.status());
  (*server)->SetOnFirstRequest([s = store->get()] { (void)s->Unlink(); });
  absl::StatusOr<std::unique_ptr<shm::SlotRing>> req, rep;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  // The gpu_worker makes the two rings one after the other: wait for each.
  do {
    if (!req.ok()) req = shm::SlotRing::Open(prefix + "-req", shm::RingRole::kConsumer);
    if (req.ok()) rep = shm::SlotRing::Open(prefix + "-rep", shm::RingRole::kProducer);
    if (!req.ok() || !rep.ok()) absl::SleepFor(absl::Milliseconds(10));
  } while ((!req.ok() || !rep.ok()) && absl::Now() < deadline && !stop.load());
  if (!req.ok()) return void(*result = req.status());
  if (!rep.ok()) return void(*result = rep.status());
  *result = (*server)->Serve(**req, **rep, stop);
}

TEST_F(WorkerOverGrpc, ExpertsOnACpuWorkerGiveTheGoldenTokens) {
  const std::string name = absl::StrCat("tandem-wstest-", getpid());
  proto::LoadModelRequest req = LoadRequest("mixtral_f32");
  req.set_data_segment("/" + name);
  req.set_attach_timeout_ms(30000);
  auto ckpt = Checkpoint::Open(ModelDir("mixtral_f32"));
  ASSERT_TRUE(ckpt.ok());
  const ModelConfig& c = (*ckpt)->config();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    auto* layer = req.mutable_cpu_placement()->add_experts();
    if (!c.IsMoeLayer(l)) continue;
    for (int32_t e = 0; e < c.num_experts; ++e) layer->add_experts(e);
  }
  std::atomic<bool> stop{false};
  absl::Status served;
  std::thread cpu([&] { ServeExperts(ModelDir("mixtral_f32"), "/" + name, stop, &served); });
  const grpc::Status s = Load(req);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const Golden g = LoadGolden("mixtral_f32");
  EXPECT_EQ(Greedy(1, g.prompt, g.continuation.size()), g.continuation);
  // Ring names go once both sides attached, the weight store's with the
  // first request.
  EXPECT_EQ(CountShm(name), 0);
  stop.store(true);
  cpu.join();
  EXPECT_TRUE(served.ok() || absl::IsUnavailable(served)) << served;
}

TEST_F(WorkerOverGrpc, ACpuWorkerThatNeverAttachesIsUnavailable) {
  const std::string name = absl::StrCat("tandem-wstest-none-", getpid());
  proto::LoadModelRequest req = LoadRequest("mixtral_f32");
  req.set_data_segment("/" + name);
  req.set_attach_timeout_ms(300);
  req.mutable_cpu_placement()->add_experts()->add_experts(0);
  const absl::Time t0 = absl::Now();
  const grpc::Status s = Load(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find(name), std::string::npos) << s.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_EQ(CountShm(name), 0);  // the rings are gone
  proto::StepResult r;
  EXPECT_EQ(Step(Plan(0, 1, {1}, 0, 0), &r).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace tandem
