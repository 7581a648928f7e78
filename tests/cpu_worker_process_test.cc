// The engine with routed experts in a real `tandem cpu-worker` process,
// reached through shared-memory rings: logits equal the all-local engine's;
// killing the cpu_worker mid-run fails the next step with kUnavailable within
// the timeout (no hang), and leaves nothing behind in /dev/shm.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/shm_expert_offload.h"
#include "gtest/gtest.h"

extern char** environ;

namespace tandem {
namespace {

std::string ModelDir(const std::string& name) {
  return std::string(TANDEM_TESTDATA_DIR) + "/models/" + name;
}

std::unique_ptr<Engine> Load(const std::string& name) {
  auto ckpt = Checkpoint::Open(ModelDir(name));
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  EngineOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

pid_t SpawnCpuWorker(const std::string& model, const std::string& spec, const std::string& rings) {
  std::vector<std::string> args = {TANDEM_BINARY, "cpu-worker", "--model", model,
                                   "--cpu-experts", spec, "--expert-rings", rings};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, TANDEM_BINARY, nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

std::vector<float> Logits(Engine& e, int64_t seq, absl::Status* status = nullptr) {
  SequenceChunk c{seq, {3, 14, 15, 92, 65, 35, 89, 79, 32, 38}, 0, true};
  auto r = e.Step({c});
  if (status) *status = r.status();
  e.FreeSequence(seq);
  return r.ok() ? r->logits : std::vector<float>{};
}

int CountShm(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (f.path().filename().string().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

class CpuWorkerProcess : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuWorkerProcess, ExpertsInACpuWorkerGiveTheSameLogits) {
  auto engine = Load(GetParam());
  const auto want = Logits(*engine, 1);
  const std::string name = absl::StrCat("tandem-test-", getpid(), "-", GetParam());
  ShmOffloadOptions so;
  so.name_prefix = "/" + name;
  so.hidden = engine->config().hidden_size;
  so.slot_bytes = 64 << 10;  // small slots: a layer's rows span several messages
  so.slot_count = 2;
  std::vector<std::vector<int32_t>> placement(static_cast<size_t>(engine->config().num_layers));
  for (int64_t l = 0; l < engine->config().num_layers; ++l) {
    if (!engine->config().IsMoeLayer(l)) continue;
    for (int32_t e = 0; e < engine->config().num_experts; e += 2) placement[l].push_back(e);
  }
  auto offload = ShmExpertOffload::Create(so, placement);
  ASSERT_TRUE(offload.ok()) << offload.status();
  // The cpu_worker holds the even experts ("all" would also do: it only
  // computes what it is sent).
  const pid_t pid = SpawnCpuWorker(ModelDir(GetParam()), "all", so.name_prefix);
  ASSERT_TRUE((*offload)->WaitForWorker(absl::Seconds(60)).ok());
  engine->SetExpertOffload(offload->get());

  const auto got = Logits(*engine, 2);
  ASSERT_EQ(got.size(), want.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LT(diff / ref, 1e-5);

  // Kill the cpu_worker: the next step fails promptly and cleanly.
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s;
  Logits(*engine, 3, &s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(secs, 12.0);
  EXPECT_EQ(engine->SequenceLength(3), 0);
  // The engine serves again with local experts.
  engine->SetExpertOffload(nullptr);
  EXPECT_EQ(Logits(*engine, 4), want);
  offload->reset();
  // Rings and weight store were unlinked once in use: nothing is left.
  EXPECT_EQ(CountShm(name), 0);
}

INSTANTIATE_TEST_SUITE_P(MoeModels, CpuWorkerProcess,
                         ::testing::Values("mixtral_f32", "qwen2_moe_f32", "qwen3_moe_bf16",
                                           "olmoe_f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
