// CPU attention (Neo) through a real `tandem cpu-worker --attention` process:
// LoadModel with cpu_kv_tokens creates the attention rings and waits for the
// child to attach and allocate the CPU KV cache; StepPlans that mark some
// sequences cpu_attention give the golden greedy tokens (with experts on the
// same child for an MoE model); killing the child fails the next step with
// kUnavailable within a second and leaves nothing in /dev/shm; a child that
// never comes, or refuses the cache, fails LoadModel with the right code.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gpu_worker/service/model_loader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace tandem {
namespace {

std::string ModelDir(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

// A `tandem cpu-worker` child; SIGKILLed and reaped if still running.
class CpuWorker {
 public:
  explicit CpuWorker(std::vector<std::string> args) {
    args.insert(args.begin(), {TANDEM_BINARY, "cpu-worker"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, TANDEM_BINARY, nullptr, nullptr, argv.data(), environ), 0);
  }
  ~CpuWorker() { Kill(); }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = 0;
  }

 private:
  pid_t pid_ = 0;
};

int CountShm(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (f.path().filename().string().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

struct Greedy {
  std::vector<int32_t> prompt, continuation;
};
std::vector<Greedy> LoadGreedy(const std::string& model) {
  std::ifstream f(ModelDir(model) + "/golden.json");
  const auto j = nlohmann::json::parse(f);
  std::vector<Greedy> g;
  for (const auto& e : j["greedy"]) {
    g.push_back({e["prompt"].get<std::vector<int32_t>>(),
                 e["continuation"].get<std::vector<int32_t>>()});
  }
  return g;
}

proto::LoadModelRequest Request(const std::string& model, const std::string& segment,
                                int64_t cpu_kv_tokens) {
  proto::LoadModelRequest r;
  r.set_model_path(ModelDir(model));
  r.set_max_context(128);
  r.set_block_size(16);
  r.set_kv_blocks(2 * 128 / 16);
  r.set_data_segment(segment);
  r.set_cpu_kv_tokens(cpu_kv_tokens);
  r.set_attach_timeout_ms(60000);
  return r;
}

proto::StepSequence Seq(int64_t id, std::vector<int32_t> tokens, int64_t start, bool cpu,
                        int64_t generated) {
  proto::StepSequence s;
  s.set_seq_id(id);
  for (int32_t t : tokens) s.add_tokens(t);
  s.set_start_pos(start);
  s.set_sample(true);
  s.set_cpu_attention(cpu);
  s.set_generated(generated);
  s.mutable_sampling()->set_top_p(1.0f);
  return s;
}

// Runs the golden greedy prompts together through plans: prompt i on
// sequence 20+i, on the CPU when cpu[i]; returns each one's tokens.
std::vector<std::vector<int32_t>> RunGreedy(StepExecutor& ex, const std::vector<Greedy>& g,
                                            const std::vector<bool>& cpu) {
  std::vector<std::vector<int32_t>> got(g.size());
  std::vector<int64_t> pos(g.size(), 0);
  for (size_t step = 0; step < g[0].continuation.size(); ++step) {
    proto::StepPlan p;
    p.set_step(static_cast<int64_t>(step));
    for (size_t i = 0; i < g.size(); ++i) {
      std::vector<int32_t> next = step == 0 ? g[i].prompt : std::vector<int32_t>{got[i].back()};
      *p.add_sequences() = Seq(20 + static_cast<int64_t>(i), next, pos[i], cpu[i],
                               static_cast<int64_t>(step));
      pos[i] += static_cast<int64_t>(next.size());
    }
    auto r = ex.Run(p);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    for (size_t i = 0; i < g.size(); ++i) got[i].push_back(r->results(static_cast<int>(i)).token());
  }
  return got;
}

class CpuAttentionProcess : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuAttentionProcess, GoldenTokensThenAKilledWorkerIsUnavailableFast) {
  const std::string model = GetParam();
  const std::string name = absl::StrCat("tandem-cpuattn-", getpid(), "-", model);
  const bool moe = model != "llama_f32";
  std::vector<std::string> args = {"--model", ModelDir(model), "--expert-rings", "/" + name,
                                   "--attention", "--dtype", "f32"};
  proto::LoadModelRequest req = Request(model, "/" + name, 512);
  if (moe) {
    // Experts on the same child: both ring pairs, one thread each there.
    args.insert(args.end(), {"--cpu-experts", "all"});
    for (int l = 0; l < 2; ++l) {  // mixtral_f32: 2 layers of 4 experts
      auto* layer = req.mutable_cpu_placement()->add_experts();
      for (int32_t e = 0; e < 4; e += 2) layer->add_experts(e);
    }
  } else {
    args.insert(args.end(), {"--cpu-experts", "none"});
  }
  CpuWorker child(args);
  auto loaded = LoadModelForWorker(req);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->response.cpu_kv_tokens(), 512);
  StepExecutor& ex = *loaded->executor;

  const std::vector<Greedy> g = LoadGreedy(model);
  const auto got = RunGreedy(ex, g, {true, false, true});
  ASSERT_EQ(got.size(), g.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(got[i], g[i].continuation) << "prompt " << i;
  // Ring names go once both sides attached, the expert weight store's with
  // its first request.
  EXPECT_EQ(CountShm(name), 0);
  // Free all and run again with the placements swapped: ids reused.
  proto::StepPlan free;
  for (int64_t id = 20; id < 23; ++id) free.add_free_seq_ids(id);
  ASSERT_TRUE(ex.Run(free).ok());
  const auto again = RunGreedy(ex, g, {false, true, false});
  ASSERT_EQ(again.size(), g.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(again[i], g[i].continuation) << "prompt " << i;

  // Kill the cpu_worker: the next step with a CPU sequence fails fast.
  child.Kill();
  const auto t0 = std::chrono::steady_clock::now();
  proto::StepPlan p;
  *p.add_sequences() = Seq(21, {again[1].back()}, static_cast<int64_t>(g[1].prompt.size()) + 15,
                           true, 16);
  EXPECT_EQ(ex.Run(p).status().code(), absl::StatusCode::kUnavailable);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.0);
  loaded = absl::UnavailableError("released");  // closes the rings
  EXPECT_EQ(CountShm(name), 0);
}

INSTANTIATE_TEST_SUITE_P(Models, CpuAttentionProcess,
                         ::testing::Values("llama_f32", "mixtral_f32"));

TEST(CpuAttentionLoad, NoWorkerIsUnavailableAndBadRequestsAreInvalid) {
  const std::string name = absl::StrCat("tandem-cpuattn-none-", getpid());
  proto::LoadModelRequest req = Request("qwen2_f32", "/" + name, 256);
  req.set_attach_timeout_ms(300);
  const absl::Time t0 = absl::Now();
  auto m = LoadModelForWorker(req);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable) << m.status();
  EXPECT_NE(m.status().message().find(name), std::string::npos) << m.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_EQ(CountShm(name), 0);

  req = Request("qwen2_f32", "", 256);  // no ring prefix
  EXPECT_EQ(LoadModelForWorker(req).status().code(), absl::StatusCode::kInvalidArgument);
  req = Request("qwen2_f32", "/" + name, -1);
  EXPECT_EQ(LoadModelForWorker(req).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuAttentionLoad, AWorkerThatHoldsLessKvRefusesTheLoad) {
  const std::string name = absl::StrCat("tandem-cpuattn-small-", getpid());
  CpuWorker child({"--model", ModelDir("qwen2_f32"), "--expert-rings", "/" + name,
                   "--attention", "--cpu-experts", "none", "--cpu-kv-tokens", "100"});
  auto m = LoadModelForWorker(Request("qwen2_f32", "/" + name, 256));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
}

}  // namespace
}  // namespace tandem
