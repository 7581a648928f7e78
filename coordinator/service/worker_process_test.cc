// The coordinator core against the REAL `tandem gpu-worker` process over
// 127.0.0.1: the worker prints `listening on HOST:PORT`, registers with the
// in-process WorkerRegistry, the StepDriver loads the test model on it and
// serves requests. Checks the golden greedy continuations, that 16
// concurrent requests of mixed lengths (with preemption: the KV pool is
// small) each equal their single-request result, routed experts on a real
// `tandem cpu-worker`, and recovery when the gpu_worker is killed.
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
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/service/step_driver.h"
#include "coordinator/service/testing/event_collector.h"
#include "coordinator/service/worker_registry.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace tandem::coord {
namespace {

std::string ModelDir(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// A child `tandem` process with stdout on a pipe; SIGKILLed if still
// running when destroyed.
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
    EXPECT_EQ(posix_spawn(&pid_, TANDEM_BINARY, &fa, nullptr, argv.data(),
                          environ),
              0);
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

struct Golden {
  std::vector<int32_t> prompt, continuation;
};
std::vector<Golden> LoadGoldens(const std::string& model) {
  const auto j = ReadJson(ModelDir(model) + "/golden.json");
  std::vector<Golden> out;
  for (const auto& g : j["greedy"]) {
    out.push_back({g["prompt"].get<std::vector<int32_t>>(),
                   g["continuation"].get<std::vector<int32_t>>()});
  }
  return out;
}

class WorkerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerRegistryOptions ro;
    ro.heartbeat_interval = absl::Milliseconds(200);
    ro.dead_after = absl::Seconds(1);
    ro.log = [](const std::string&) {};
    auto reg = WorkerRegistry::Create(ro);
    ASSERT_TRUE(reg.ok()) << reg.status();
    registry_ = *std::move(reg);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                       &port);
    b.RegisterService(registry_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    registry_address_ = absl::StrCat("127.0.0.1:", port);
  }

  void TearDown() override {
    if (registry_) registry_->SetListener(nullptr);
    if (driver_) driver_->Stop();
    workers_.clear();  // SIGKILL whatever is left
    if (server_) server_->Shutdown();
  }

  // The driver for `model`: context 128, KV blocks of 16 tokens.
  void StartDriver(const std::string& model, int64_t kv_blocks = 32,
                   std::vector<std::vector<int32_t>> cpu_experts = {},
                   std::string data_segment = "") {
    const auto config = ReadJson(ModelDir(model) + "/config.json");
    StepDriverConfig c;
    c.model.model_path = ModelDir(model);
    c.model.max_context = 128;
    c.model.block_size = 16;
    c.model.kv_blocks = kv_blocks;
    c.model.cpu_experts = std::move(cpu_experts);
    c.model.data_segment = std::move(data_segment);
    c.model.attach_timeout = absl::Seconds(60);
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 256;
    c.eos_token_ids = {config["eos_token_id"].get<int32_t>()};
    c.vocab_size = config["vocab_size"].get<int64_t>();
    c.step_timeout = absl::Seconds(60);
    c.load_retry_interval = absl::Milliseconds(100);
    c.log = [](const std::string&) {};
    auto d = StepDriver::Create(std::move(c));
    ASSERT_TRUE(d.ok()) << d.status();
    driver_ = *std::move(d);
    registry_->SetListener(driver_.get());
  }

  // Starts `tandem gpu-worker` registering with our registry; returns the
  // address it printed.
  std::string StartGpuWorker() {
    workers_.push_back(std::make_unique<Child>(std::vector<std::string>{
        "gpu-worker", "--coordinator", registry_address_, "--listen",
        "127.0.0.1:0", "--device", "host", "--rank", "0"}));
    const std::string line = workers_.back()->ReadLine(absl::Seconds(30));
    constexpr absl::string_view kPrefix = "listening on ";
    EXPECT_TRUE(absl::StartsWith(line, kPrefix)) << "stdout: '" << line << "'";
    return absl::StartsWith(line, kPrefix) ? line.substr(kPrefix.size()) : "";
  }

  bool WaitReady(absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!driver_->ready()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  int64_t Submit(const std::vector<int32_t>& prompt, int64_t max_tokens,
                 float temperature = 0.0f, uint64_t seed = 0) {
    GenerationRequest r;
    r.prompt_ids = prompt;
    r.params.max_tokens = max_tokens;
    r.params.temperature = temperature;
    r.params.seed = seed;
    r.params.ignore_eos = true;
    auto id = driver_->Submit(std::move(r), events_.Callback());
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : -1;
  }

  // Runs one request alone; its tokens (empty on failure).
  std::vector<int32_t> RunAlone(const std::vector<int32_t>& prompt,
                                int64_t max_tokens, float temperature = 0.0f,
                                uint64_t seed = 0) {
    const int64_t id = Submit(prompt, max_tokens, temperature, seed);
    EXPECT_TRUE(events_.WaitDone(id, absl::Seconds(120)));
    const testing::RequestLog log = events_.Get(id);
    EXPECT_TRUE(log.done() && log.last().status.ok())
        << (log.done() ? log.last().status.ToString() : "not done");
    return log.tokens;
  }

  void ExpectGoldens(const std::string& model) {
    for (const Golden& g : LoadGoldens(model)) {
      EXPECT_EQ(RunAlone(g.prompt, static_cast<int64_t>(g.continuation.size())),
                g.continuation);
    }
  }

  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<grpc::Server> server_;
  std::string registry_address_;
  std::unique_ptr<StepDriver> driver_;
  std::vector<std::unique_ptr<Child>> workers_;
  testing::EventCollector events_;
};

TEST_F(WorkerProcessTest, LlamaGoldenAndSixteenConcurrentRequests) {
  // KV for one sequence of 128 tokens: 16 requests do not fit at once, so
  // the scheduler preempts and recomputes (how often depends on timing).
  StartDriver("llama_f32", /*kv_blocks=*/8);
  const std::string address = StartGpuWorker();
  ASSERT_FALSE(address.empty());
  ASSERT_TRUE(WaitReady());
  const std::vector<WorkerInfo> live = registry_->workers();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].address, address);
  EXPECT_EQ(live[0].pid, workers_.back()->pid());
  EXPECT_EQ(driver_->metrics().worker_address, address);

  ExpectGoldens("llama_f32");

  // 16 requests: prefixes of the golden prompts, 1..16 tokens each, some
  // seeded-sampled; each alone first, then all at once.
  const std::vector<Golden> goldens = LoadGoldens("llama_f32");
  struct Case {
    std::vector<int32_t> prompt;
    int64_t max_tokens;
    float temperature;
    uint64_t seed;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 16; ++i) {
    const std::vector<int32_t>& full = goldens[i % 3].prompt;
    const size_t len = std::max<size_t>(1, full.size() - (i * 3) % full.size());
    cases.push_back({std::vector<int32_t>(full.begin(), full.begin() + len),
                     1 + (i * 7) % 16, i % 4 == 3 ? 0.8f : 0.0f,
                     static_cast<uint64_t>(100 + i)});
  }
  std::vector<std::vector<int32_t>> alone;
  for (const Case& c : cases) {
    alone.push_back(RunAlone(c.prompt, c.max_tokens, c.temperature, c.seed));
  }
  std::vector<int64_t> ids;
  for (const Case& c : cases) {
    ids.push_back(Submit(c.prompt, c.max_tokens, c.temperature, c.seed));
  }
  ASSERT_TRUE(events_.WaitAllDone(ids, absl::Seconds(180)));
  for (size_t i = 0; i < ids.size(); ++i) {
    const testing::RequestLog log = events_.Get(ids[i]);
    EXPECT_EQ(log.tokens, alone[i]) << "request " << i;
    EXPECT_EQ(static_cast<int64_t>(log.tokens.size()), cases[i].max_tokens);
    EXPECT_EQ(log.finals, 1);
    EXPECT_EQ(log.after_final, 0);
    EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
    EXPECT_EQ(log.last().usage.completion_tokens, cases[i].max_tokens);
  }
  const DriverMetrics m = driver_->metrics();
  EXPECT_EQ(m.num_step_failures, 0);
  EXPECT_EQ(m.gpu_kv_blocks_used, 0);
  EXPECT_EQ(m.num_model_loads, 1);
  RecordProperty("preemptions", static_cast<int>(m.num_preemptions));
}

TEST_F(WorkerProcessTest, MixtralGolden) {
  StartDriver("mixtral_f32");
  ASSERT_FALSE(StartGpuWorker().empty());
  ASSERT_TRUE(WaitReady());
  ExpectGoldens("mixtral_f32");
}

TEST_F(WorkerProcessTest, MixtralExpertsOnACpuWorker) {
  const auto config = ReadJson(ModelDir("mixtral_f32") + "/config.json");
  std::vector<std::vector<int32_t>> experts;
  for (int l = 0; l < config["num_hidden_layers"].get<int>(); ++l) {
    experts.emplace_back();
    for (int e = 0; e < config["num_local_experts"].get<int>(); ++e) {
      experts.back().push_back(e);
    }
  }
  const std::string name = absl::StrCat("tandem-coordtest-", getpid());
  StartDriver("mixtral_f32", 32, experts, "/" + name);
  ASSERT_FALSE(StartGpuWorker().empty());
  // LoadModel creates the rings and waits for the cpu_worker to open them.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto rings_exist = [&] {
    return std::filesystem::exists("/dev/shm/" + name + "-req") &&
           std::filesystem::exists("/dev/shm/" + name + "-rep");
  };
  while (!rings_exist() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(rings_exist());
  EXPECT_FALSE(driver_->ready());  // still waiting for the cpu_worker
  workers_.push_back(std::make_unique<Child>(std::vector<std::string>{
      "cpu-worker", "--model", ModelDir("mixtral_f32"), "--cpu-experts", "all",
      "--expert-rings", "/" + name}));
  ASSERT_TRUE(WaitReady());
  ExpectGoldens("mixtral_f32");
}

TEST_F(WorkerProcessTest, KilledWorkerFailsRunningAndANewOneServes) {
  StartDriver("llama_f32");
  ASSERT_FALSE(StartGpuWorker().empty());
  ASSERT_TRUE(WaitReady());
  const Golden g = LoadGoldens("llama_f32")[0];
  // Long generations (to the context limit), so some are running when the
  // worker dies.
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(Submit(g.prompt, 120));
  ASSERT_TRUE(events_.WaitEvents(ids[0], 5, absl::Seconds(60)));
  const absl::Time killed_at = absl::Now();
  ASSERT_EQ(kill(workers_.back()->pid(), SIGKILL), 0);
  ASSERT_TRUE(events_.WaitDone(ids[0], absl::Seconds(10)));
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(2));
  int errors = 0;
  for (int64_t id : ids) {
    const testing::RequestLog log = events_.Get(id);
    if (!log.done()) continue;  // still queued
    if (log.last().finish_reason == FinishReason::kError) {
      ++errors;
      EXPECT_EQ(log.last().status.code(), absl::StatusCode::kUnavailable);
    }
  }
  EXPECT_GE(errors, 1);
  // A fresh gpu_worker process: the queued requests and new ones complete.
  ASSERT_FALSE(StartGpuWorker().empty());
  const int64_t next = Submit(g.prompt, 16);
  ASSERT_TRUE(events_.WaitAllDone(ids, absl::Seconds(120)));
  ASSERT_TRUE(events_.WaitDone(next, absl::Seconds(120)));
  EXPECT_EQ(events_.Get(next).tokens, g.continuation);
  for (int64_t id : ids) {
    const testing::RequestLog log = events_.Get(id);
    if (log.last().finish_reason == FinishReason::kError) continue;
    EXPECT_EQ(log.last().finish_reason, FinishReason::kLength);
    EXPECT_EQ(log.tokens.size(), 120u);
    EXPECT_TRUE(std::equal(g.continuation.begin(), g.continuation.end(),
                           log.tokens.begin()));
  }
  EXPECT_EQ(driver_->metrics().num_model_loads, 2);
}

}  // namespace
}  // namespace tandem::coord
