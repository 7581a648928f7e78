#include "cli/child_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cli/flag_environment.h"

namespace tandem::cli {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::SpawnSelf(
    const std::vector<std::string>& args) {
  std::vector<char*> argv;
  // argv[0] is the real path, so `ps` shows what runs.
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
  argv.push_back(exe.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The child gets its flags on its command line only (flag_environment.h).
  std::vector<std::string> env = EnvironmentForChildren();
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start a child process: ", std::strerror(rc)));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid));
}

std::optional<int> ChildProcess::Poll() {
  if (status_) return status_;
  int st = 0;
  const pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

int ChildProcess::WaitOrKill(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!Poll() && absl::Now() < deadline) usleep(10000);
  if (!status_) {
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    status_ = 128 + SIGKILL;
  }
  return *status_;
}

ChildProcess::~ChildProcess() {
  if (Poll()) return;
  kill(pid_, SIGTERM);
  WaitOrKill(absl::Seconds(5));
}

}  // namespace tandem::cli
