#include "common/shm/shm_sync.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tandem::shm {
namespace {

long Futex(uint32_t* word, int op, uint32_t val, const struct timespec* timeout) {
  return ::syscall(SYS_futex, word, op, val, timeout, nullptr, 0);
}

struct ProcStat {
  bool exists = false;
  char state = '?';
  uint64_t start_time = 0;
};

// Parses /proc/<pid>/stat. The command name (field 2) is in parentheses and
// may itself contain spaces and parentheses, so fields are counted from the
// last ')'.
ProcStat ReadProcStat(int32_t pid) {
  ProcStat out;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[1024];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return out;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return out;
  p += 2;  // field 3: state
  out.exists = true;
  out.state = *p;
  // Skip to field 22 (starttime): 19 more separators after field 3.
  for (int field = 3; field < 22 && *p != '\0'; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return out;
    ++p;
  }
  out.start_time = std::strtoull(p, nullptr, 10);
  return out;
}

uint64_t OwnPidNamespace() {
  struct stat st;
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

}  // namespace

FutexResult FutexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) {
    return Atomic(*word).load(std::memory_order_acquire) == expected ? FutexResult::kTimedOut
                                                                     : FutexResult::kChanged;
  }
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  const long rc = Futex(word, FUTEX_WAIT, expected, &ts);
  if (rc == 0) return FutexResult::kWoken;
  switch (errno) {
    case EAGAIN:
      return FutexResult::kChanged;
    case ETIMEDOUT:
      return FutexResult::kTimedOut;
    default:  // EINTR: the caller rechecks its condition and deadline.
      return FutexResult::kWoken;
  }
}

int FutexWake(uint32_t* word, int count) {
  const long rc = Futex(word, FUTEX_WAKE, static_cast<uint32_t>(count), nullptr);
  return rc < 0 ? 0 : static_cast<int>(rc);
}

int FutexWakeAll(uint32_t* word) { return FutexWake(word, INT_MAX); }

ProcessIdentity ProcessIdentity::Self() {
  static const ProcessIdentity self_at_start = Of(static_cast<int32_t>(::getpid()));
  // After fork() the cached identity is the parent's; recompute.
  if (self_at_start.pid == static_cast<int32_t>(::getpid())) return self_at_start;
  return Of(static_cast<int32_t>(::getpid()));
}

ProcessIdentity ProcessIdentity::Of(int32_t pid) {
  if (pid <= 0) return {};
  const ProcStat st = ReadProcStat(pid);
  if (!st.exists) return {};
  // A pid visible in our /proc is one of our namespace (or a child one, where
  // it would not be visible by this number).
  return ProcessIdentity{pid, st.start_time, OwnPidNamespace()};
}

bool IsProcessAlive(const ProcessIdentity& id) {
  if (id.pid <= 0) return false;
  const uint64_t own_ns = OwnPidNamespace();
  if (own_ns == 0 || id.pid_ns != own_ns) return true;  // cannot tell from here
  const ProcStat st = ReadProcStat(id.pid);
  if (!st.exists) return false;
  if (st.state == 'Z' || st.state == 'X' || st.state == 'x') return false;
  return id.start_time == 0 || st.start_time == id.start_time;
}

}  // namespace tandem::shm
