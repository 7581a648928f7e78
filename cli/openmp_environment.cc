#include "cli/openmp_environment.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tandem::cli {
namespace {

// Set on the re-execution, so that it and its children know the wait
// policy is ours, not the user's.
constexpr char kOursVar[] = "TANDEM_OPENMP_WAIT";

// `bench`, and `generate` unless a cpu_worker process computes beside it.
bool ComputesAlone(char** argv) {
  if (argv[0] == nullptr || argv[1] == nullptr) return false;
  const std::string command = argv[1];
  if (command == "bench") return true;
  if (command != "generate") return false;
  for (int i = 2; argv[i] != nullptr; ++i) {
    const std::string a = argv[i];
    const char* next = argv[i + 1];
    auto value = [&](const std::string& flag) -> std::string {
      if (a == flag) return next != nullptr ? next : "";
      if (a.rfind(flag + "=", 0) == 0) return a.substr(flag.size() + 1);
      return "";
    };
    const std::string experts = value("--cpu-experts");
    if (!experts.empty() && experts != "none") return false;
    if (value("--cpu-attention") == "worker") return false;
  }
  return true;
}

}  // namespace

bool OpenMpWaitChosenByUser() {
  if (std::getenv(kOursVar) != nullptr) return false;
  return std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr;
}

void SpinBeforeSleepInChildren() {
  if (OpenMpWaitChosenByUser()) return;
  setenv("GOMP_SPINCOUNT", kAloneSpinCount, 1);
}

void EnsureOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;  // the user's, or set by the re-execution (or a parent) already
  }
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0 || setenv(kOursVar, "1", 1) != 0) return;
  if (ComputesAlone(argv) && setenv("GOMP_SPINCOUNT", kAloneSpinCount, 1) != 0) return;
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "tandem: cannot re-execute with OMP_WAIT_POLICY=PASSIVE (%s); going on\n",
               std::strerror(errno));
}

}  // namespace tandem::cli
