// A child process of this executable (`/proc/self/exe <args>`), started with
// posix_spawn and reaped by its owner: killed (SIGTERM, then SIGKILL) if
// still running when the owner is destroyed, so no worker outlives it.
#ifndef TANDEM_CLI_CHILD_PROCESS_H_
#define TANDEM_CLI_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::cli {

class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnSelf(
      const std::vector<std::string>& args);
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // The exit status if the child has ended (non-blocking), else nullopt.
  std::optional<int> Poll();
  // Waits up to `timeout` for the child to end; SIGKILLs it after that.
  int WaitOrKill(absl::Duration timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> status_;
};

}  // namespace tandem::cli

#endif  // TANDEM_CLI_CHILD_PROCESS_H_
