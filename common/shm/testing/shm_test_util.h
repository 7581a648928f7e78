// Helpers for the shared-memory tests and benchmark: forked children that are
// always reaped, unique segment-name prefixes, a printable random seed, and
// self-checking messages (sequence number, length, checksum).
#ifndef TANDEM_COMMON_SHM_TESTING_SHM_TEST_UTIL_H_
#define TANDEM_COMMON_SHM_TESTING_SHM_TEST_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tandem::shm::testing {

// "/tandem-test-<tag>-<pid>-<random>-": every segment of one test starts with
// it, so the test can check that it left nothing in /dev/shm.
std::string UniquePrefix(std::string_view tag);

// TANDEM_SHM_TEST_SEED from the environment if set, else a fresh random seed.
// Tests print it (SCOPED_TRACE) so a failure can be replayed.
uint64_t TestSeed();

// A child process running `fn` (its return value is the exit status). The
// child dies with its parent (PR_SET_PDEATHSIG) and calls _exit, so it never
// runs the parent's destructors or test framework. The destructor SIGKILLs
// and reaps a child that is still running.
class ForkedChild {
 public:
  static ForkedChild Start(std::function<int()> fn);
  ForkedChild(ForkedChild&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }
  ForkedChild& operator=(ForkedChild&&) = delete;
  ~ForkedChild();

  pid_t pid() const { return pid_; }
  // Exit status (0..255), or -signal if killed by a signal; nullopt if it is
  // still running after `timeout`.
  std::optional<int> Wait(absl::Duration timeout);
  // SIGKILL without reaping (the child stays a zombie until Wait()).
  void Kill();

 private:
  explicit ForkedChild(pid_t pid) : pid_(pid) {}
  pid_t pid_;
};

// Self-checking messages for ring tests: a 16-byte header (seq, length,
// checksum of the payload) and a pseudo-random payload derived from
// (seed, seq). Sizes are pseudo-random in [kMinMessageBytes, max_bytes].
inline constexpr int64_t kMinMessageBytes = 16;
int64_t MessageSize(uint64_t seed, uint64_t seq, int64_t max_bytes);
// Writes message `seq` (of out.size() bytes, >= kMinMessageBytes) into `out`.
void FillMessage(uint64_t seed, uint64_t seq, absl::Span<uint8_t> out);
// OK if `msg` is message `expected_seq` of size MessageSize(seed, seq, max).
absl::Status CheckMessage(uint64_t seed, uint64_t expected_seq, int64_t max_bytes,
                          absl::Span<const uint8_t> msg);

}  // namespace tandem::shm::testing

#endif  // TANDEM_COMMON_SHM_TESTING_SHM_TEST_UTIL_H_
