#include "common/shm/testing/shm_test_util.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace tandem::shm::testing {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct MessageHeader {
  uint64_t seq;
  uint32_t length;
  uint32_t checksum;
};
static_assert(sizeof(MessageHeader) == kMinMessageBytes);

uint32_t Checksum(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

}  // namespace

std::string UniquePrefix(std::string_view tag) {
  std::random_device rd;
  return absl::StrCat("/tandem-test-", std::string(tag), "-", ::getpid(), "-", rd() % 1000000, "-");
}

uint64_t TestSeed() {
  if (const char* env = std::getenv("TANDEM_SHM_TEST_SEED")) {
    return std::strtoull(env, nullptr, 10);
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

ForkedChild ForkedChild::Start(std::function<int()> fn) {
  const pid_t parent = ::getpid();
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    std::abort();
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(100);  // the parent died before prctl
    const int rc = fn();
    std::fflush(nullptr);
    ::_exit(rc);
  }
  return ForkedChild(pid);
}

ForkedChild::~ForkedChild() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

std::optional<int> ForkedChild::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return std::nullopt;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return -WTERMSIG(status);
      return -1000;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

void ForkedChild::Kill() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

int64_t MessageSize(uint64_t seed, uint64_t seq, int64_t max_bytes) {
  const uint64_t r = SplitMix(seed ^ (seq * 0x632be59bd9b4e019ull));
  const uint64_t span = static_cast<uint64_t>(max_bytes - kMinMessageBytes + 1);
  // Every 16th message is full-size, so slot boundaries are exercised.
  if ((r >> 60) == 0) return max_bytes;
  return kMinMessageBytes + static_cast<int64_t>(r % span);
}

void FillMessage(uint64_t seed, uint64_t seq, absl::Span<uint8_t> out) {
  uint8_t* payload = out.data() + sizeof(MessageHeader);
  const size_t n = out.size() - sizeof(MessageHeader);
  uint64_t state = seed ^ (seq << 17) ^ 0x5bd1e995u;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = SplitMix(state++);
    std::memcpy(payload + i, &w, 8);
  }
  const uint64_t tail = SplitMix(state);
  if (i < n) std::memcpy(payload + i, &tail, n - i);
  MessageHeader h{seq, static_cast<uint32_t>(out.size()), Checksum(payload, n)};
  std::memcpy(out.data(), &h, sizeof(h));
}

absl::Status CheckMessage(uint64_t seed, uint64_t expected_seq, int64_t max_bytes,
                          absl::Span<const uint8_t> msg) {
  if (msg.size() < sizeof(MessageHeader)) {
    return absl::DataLossError(absl::StrCat("message ", expected_seq, ": ", msg.size(), " bytes"));
  }
  MessageHeader h;
  std::memcpy(&h, msg.data(), sizeof(h));
  if (h.seq != expected_seq) {
    return absl::DataLossError(
        absl::StrCat("expected message ", expected_seq, ", got message ", h.seq));
  }
  const int64_t want = MessageSize(seed, expected_seq, max_bytes);
  if (h.length != msg.size() || static_cast<int64_t>(msg.size()) != want) {
    return absl::DataLossError(absl::StrCat("message ", expected_seq, ": ", msg.size(),
                                            " bytes, header says ", h.length, ", want ", want));
  }
  const uint32_t sum = Checksum(msg.data() + sizeof(h), msg.size() - sizeof(h));
  if (sum != h.checksum) {
    return absl::DataLossError(absl::StrCat("message ", expected_seq, ": checksum mismatch"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::shm::testing
