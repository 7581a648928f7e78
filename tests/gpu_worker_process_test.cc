// The real `tandem gpu-worker` process against an in-test fake Registry over
// 127.0.0.1: it prints its bound port, registers with its address and pid,
// runs LoadModel and Steps over gRPC (the golden greedy tokens), reports its
// steps in heartbeats, and exits 0 on SIGTERM or a Shutdown call. With a real
// `tandem cpu-worker` attached to its expert rings the tokens are the same,
// and both processes exit cleanly leaving nothing in /dev/shm.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gpu_worker/service/testing/fake_registry.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/worker.grpc.pb.h"

extern char** environ;

namespace tandem {
namespace {

std::string ModelDir(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

// A child `tandem` process with its stdout on a pipe; killed if still running.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    args.insert(args.begin(), TANDEM_BINARY);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    EXPECT_EQ(posix_spawn(&pid_, TANDEM_BINARY, &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (!status_) {
      kill(pid_, SIGKILL);
      Wait(absl::Seconds(10));
    }
    close(out_);
  }
  pid_t pid() const { return pid_; }

  // The next stdout line, or "" at EOF or after `timeout`.
  std::string ReadLine(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (ms <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
      char chunk[256];
      const ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  // The exit status (128 + signal if killed), or nullopt after `timeout`.
  std::optional<int> Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!status_) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      } else if (absl::Now() > deadline) {
        return std::nullopt;
      } else {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    return status_;
  }

 private:
  pid_t pid_ = 0;
  int out_ = -1;
  std::string buf_;
  std::optional<int> status_;
};

// "listening on 127.0.0.1:PORT" → PORT (0 if the line is not that).
int ListeningPort(const std::string& line) {
  constexpr absl::string_view kPrefix = "listening on 127.0.0.1:";
  int port = 0;
  if (!absl::StartsWith(line, kPrefix) || !absl::SimpleAtoi(line.substr(kPrefix.size()), &port)) {
    return 0;
  }
  return port;
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

std::unique_ptr<proto::Worker::Stub> Connect(int port) {
  return proto::Worker::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                    grpc::InsecureChannelCredentials()));
}

proto::LoadModelRequest LoadRequest(const std::string& model) {
  proto::LoadModelRequest r;
  r.set_model_path(ModelDir(model));
  r.set_max_context(64);
  r.set_kv_blocks(8);
  r.set_block_size(16);
  return r;
}

// Greedy tokens over the wire (empty on an error, which is reported).
std::vector<int32_t> Greedy(proto::Worker::Stub& stub, const Golden& g) {
  std::vector<int32_t> out, next = g.prompt;
  int64_t pos = 0;
  for (size_t i = 0; i < g.continuation.size(); ++i) {
    proto::StepPlan plan;
    plan.set_step(static_cast<int64_t>(i));
    proto::StepSequence* s = plan.add_sequences();
    s->set_seq_id(1);
    for (int32_t t : next) s->add_tokens(t);
    s->set_start_pos(pos);
    s->set_sample(true);
    s->set_generated(static_cast<int64_t>(i));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    proto::StepResult r;
    const grpc::Status st = stub.Step(&ctx, plan, &r);
    EXPECT_TRUE(st.ok()) << st.error_message();
    if (!st.ok() || r.results_size() != 1) return {};
    pos += static_cast<int64_t>(next.size());
    out.push_back(r.results(0).token());
    next = {out.back()};
  }
  return out;
}

int CountShm(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (f.path().filename().string().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

TEST(GpuWorkerProcess, RegistersServesAndExitsOnSigterm) {
  testing::FakeRegistry registry(/*heartbeat_ms=*/50);
  int registry_port = 0;
  auto registry_server = testing::StartServer(&registry, 0, &registry_port);
  ASSERT_NE(registry_server, nullptr);

  Child worker({"gpu-worker", "--coordinator", absl::StrCat("127.0.0.1:", registry_port),
                "--listen", "127.0.0.1:0", "--device", "host", "--rank", "0"});
  const std::string line = worker.ReadLine(absl::Seconds(30));
  const int port = ListeningPort(line);
  ASSERT_GT(port, 0) << "first stdout line: '" << line << "'";

  ASSERT_TRUE(registry.WaitRegistrations(1, absl::Seconds(30)));
  const proto::RegisterRequest reg = registry.last_request();
  EXPECT_EQ(reg.kind(), proto::WORKER_KIND_GPU);
  EXPECT_EQ(reg.address(), absl::StrCat("127.0.0.1:", port));
  EXPECT_EQ(reg.device(), "host");
  EXPECT_EQ(reg.rank(), 0);
  EXPECT_EQ(reg.pid(), worker.pid());
  EXPECT_FALSE(reg.hostname().empty());

  auto stub = Connect(port);
  {
    grpc::ClientContext ctx;
    proto::LoadModelResponse resp;
    const grpc::Status s = stub->LoadModel(&ctx, LoadRequest("llama_f32"), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.kv_blocks(), 8);
  }
  const Golden g = LoadGolden("llama_f32");
  EXPECT_EQ(Greedy(*stub, g), g.continuation);
  // Heartbeats carry the steps done.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (registry.last_steps_done() < static_cast<int64_t>(g.continuation.size()) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(registry.last_steps_done(), static_cast<int64_t>(g.continuation.size()));

  ASSERT_EQ(kill(worker.pid(), SIGTERM), 0);
  const std::optional<int> rc = worker.Wait(absl::Seconds(5));
  ASSERT_TRUE(rc.has_value()) << "gpu-worker still running 5 s after SIGTERM";
  EXPECT_EQ(*rc, 0);
  registry_server->Shutdown();
}

TEST(GpuWorkerProcess, ShutdownCallEndsTheProcess) {
  Child worker({"gpu-worker", "--listen", "127.0.0.1:0"});
  const int port = ListeningPort(worker.ReadLine(absl::Seconds(30)));
  ASSERT_GT(port, 0);
  auto stub = Connect(port);
  grpc::ClientContext ctx;
  proto::DrainResponse d;
  const grpc::Status s = stub->Shutdown(&ctx, proto::DrainRequest(), &d);
  EXPECT_TRUE(s.ok()) << s.error_message();
  const std::optional<int> rc = worker.Wait(absl::Seconds(5));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 0);
}

TEST(GpuWorkerProcess, BadFlagsExitWithStatusOne) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"gpu-worker", "--device", "cuda:0"},
           {"gpu-worker", "--listen", "no-port-here"},
           {"gpu-worker", "--coordinator", "nowhere", "--listen", "127.0.0.1:0"}}) {
    Child worker(args);
    const std::optional<int> rc = worker.Wait(absl::Seconds(10));
    ASSERT_TRUE(rc.has_value()) << args[1];
    EXPECT_EQ(*rc, 1) << args[1];
  }
}

TEST(GpuWorkerProcess, ExpertsOnACpuWorkerProcess) {
  Child worker({"gpu-worker", "--listen", "127.0.0.1:0"});
  const int port = ListeningPort(worker.ReadLine(absl::Seconds(30)));
  ASSERT_GT(port, 0);
  const std::string name = absl::StrCat("tandem-gwtest-", getpid());

  proto::LoadModelRequest req = LoadRequest("mixtral_f32");
  req.set_data_segment("/" + name);
  req.set_attach_timeout_ms(60000);
  // All routed experts of the model (every layer of mixtral is MoE).
  std::ifstream f(ModelDir("mixtral_f32") + "/config.json");
  const auto config = nlohmann::json::parse(f);
  for (int l = 0; l < config["num_hidden_layers"].get<int>(); ++l) {
    auto* layer = req.mutable_cpu_placement()->add_experts();
    for (int e = 0; e < config["num_local_experts"].get<int>(); ++e) layer->add_experts(e);
  }
  auto stub = Connect(port);
  grpc::Status loaded;
  std::thread load([&] {
    grpc::ClientContext ctx;
    proto::LoadModelResponse resp;
    loaded = stub->LoadModel(&ctx, req, &resp);
  });
  // The rings exist once LoadModel has begun; then the cpu_worker opens them.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (CountShm(name) < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(CountShm(name), 2);
  Child cpu({"cpu-worker", "--model", ModelDir("mixtral_f32"), "--cpu-experts", "all",
             "--expert-rings", "/" + name});
  load.join();
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  const Golden g = LoadGolden("mixtral_f32");
  EXPECT_EQ(Greedy(*stub, g), g.continuation);

  ASSERT_EQ(kill(worker.pid(), SIGTERM), 0);
  const std::optional<int> rc = worker.Wait(absl::Seconds(5));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 0);
  const std::optional<int> cpu_rc = cpu.Wait(absl::Seconds(5));  // its rings closed
  ASSERT_TRUE(cpu_rc.has_value());
  EXPECT_EQ(*cpu_rc, 0);
  EXPECT_EQ(CountShm(name), 0);
}

}  // namespace
}  // namespace tandem
